"""Benchmarks behind ``actorlog bench ...``; each prints a summary and writes ``--json FILE``.

Micro benchmarks of the runtime and cores: ``actor_hop``, ``timer_bench``,
``log_bench``, ``trace_bench`` (with ``trace_gen``). Load against any Kafka
broker: ``load`` (``load_core``, ``load_produce``, ``load_consume``),
``compare`` (alternating rounds against a peer broker), ``sweep``, ``peers``.
Fuzzing: ``fuzz`` (the command), ``fuzz_targets`` (the decode paths as functions of one
input), ``fuzz_worker`` (the atheris process), ``fuzz_live`` (a running broker over TCP).
Some need the ``bench`` extra; they are imported only when their command runs.
"""
