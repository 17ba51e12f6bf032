"""The libFuzzer process of `actorlog bench fuzz`: ``python -m bench.fuzz_worker TARGET ARGS``.

libFuzzer owns this process (it exits when the run ends, on a crash, on a
hang), so the bench runs it as a child and reads what it printed. The
modules of the decode path are imported inside ``atheris.instrument_imports``
so that their branches are the coverage that guides the mutations. ARGS are
libFuzzer's: flags (``-runs=N``, ``-max_total_time=S``, ``-timeout=1``,
``-artifact_prefix=DIR/``) and corpus directories, the first of which
receives the new inputs.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import time
import traceback
from typing import Any

# What each target's coverage is measured over: the packages its decode path runs
# (top-level names; atheris instruments their modules imported from here on) ...
INSTRUMENTED: dict[str, list[str]] = {
    "kafka": ["wire", "actors"],
    "envelope": ["wire", "actors"],
}
# ... less what is imported before (uninstrumented): the parts of the node the path
# does not run, which would only make the start slow (instrumenting all of them takes
# half a minute on a busy machine). kafka.protocol's request decoders are generated
# at run time, so they are instrumented one by one once compiled (see _instrument_codecs).
_LIBRARIES = ("loguru", "msgpack", "zmq", "pykka")
NOT_INSTRUMENTED: dict[str, tuple[str, ...]] = {
    "kafka": (*_LIBRARIES, "kafka", "actors.runtime.node", "actors.security.sasl",
              "actors.security.tls_connection", "actors.security.acl", "actors.metadata",
              "actors.core.group_state", "actors.core.partition_log"),
    "envelope": _LIBRARIES,
}


def _instrument_codecs(atheris: Any, seeds: list[bytes]) -> int:
    """The compiled kafka.protocol decoders of the headers and of the API versions the
    seeds use, instrumented (all 189 of them would take ten seconds more to start; the
    others still run, their branches just do not guide the mutations)."""
    from wire.kafka_codec import requests

    wanted = {(int.from_bytes(s[0:2], "big", signed=True),
               int.from_bytes(s[2:4], "big", signed=True)) for s in seeds if len(s) >= 4}
    decoders = {id(d): d for table in (requests._header_decoders,
                                       requests._header_decoders_by_version)
                for d in table.values()}
    decoders.update((id(d), d) for key, d in requests._request_decoders.items() if key in wanted)
    for decoder in decoders.values():
        atheris.instrument_func(decoder)
    return len(decoders)


def main(argv: list[str]) -> None:
    import atheris

    if len(argv) < 2 or argv[1] not in INSTRUMENTED:
        sys.exit(f"usage: {argv[0]} {'|'.join(INSTRUMENTED)} [libFuzzer args...]")
    name = argv[1]
    for module in NOT_INSTRUMENTED[name]:
        importlib.import_module(module)
    with atheris.instrument_imports(include=INSTRUMENTED[name]):
        from bench.fuzz_targets import Finding, corpus_files, target

        one = target(name)  # builds the path: its modules are imported (instrumented) here
    if name == "kafka":
        _instrument_codecs(atheris, [p.read_bytes() for p in corpus_files("kafka")])

    prefix = next((a.split("=", 1)[1] for a in argv if a.startswith("-artifact_prefix=")), "./")
    started = False

    def test_one(data: bytes) -> None:
        nonlocal started
        if not started:
            # libFuzzer's own timing reads the wall clock; the bench measures on the
            # monotonic one (system-wide), from the first input to this process's end
            started = True
            print(f"FUZZ-START {time.monotonic():.6f}", file=sys.stderr, flush=True)
        try:
            one(data)
        except Finding:
            # Saved here, with the whole chain of exceptions: libFuzzer's own crash path
            # does not always get as far as writing the input out.
            path = f"{prefix}crash-{hashlib.sha1(data).hexdigest()}"
            with open(path, "wb") as out:
                out.write(data)
            traceback.print_exc()
            print(f"FUZZ-CRASH-INPUT {path}", file=sys.stderr, flush=True)
            raise

    mutator = None
    if name == "envelope":
        from bench.fuzz_targets import mutate_envelope

        def mutator(data: bytes, max_size: int, seed: int) -> bytes:
            # a quarter of the mutations structure-aware (slower), the rest libFuzzer's own
            if seed % 4 == 0:
                out = mutate_envelope(data, max_size, seed)
                if out is not None:
                    return out
            return atheris.Mutate(data, max_size)  # type: ignore[no-any-return]

    atheris.Setup([argv[0], *argv[2:]], test_one, custom_mutator=mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
