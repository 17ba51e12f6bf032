"""CURVE keys between nodes: key pairs, key files, and the node's settings.

Every node has a key pair; every node knows the public keys of all the
cluster's nodes. ``actor.curve.secret.key.file`` is this node's key file
(public and secret key), ``actor.curve.public.keys.dir`` a directory of
``<node name>.key`` files, one per node of the cluster (this node's too).
The files are ZeroMQ's certificate format (ZPL, as ``zmq.auth`` and CZMQ
write them), so ``curve_keygen``-made keys work as well.

A gateway's server socket admits a peer only if its public key is in the
directory (the ZAP handler, ``actors.security.zap``); a client socket finds
the server's public key there by the node's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.utils import z85

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"


class CurveError(ValueError):
    """Keys or key settings that cannot be used; one-line message naming the file or key."""


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """A key pair, both halves Z85 text (as ZeroMQ's socket options take them)."""

    public: bytes
    secret: bytes

    def __repr__(self) -> str:  # the secret stays out of logs
        return f"CurveKeys(public={self.public.decode()})"


def new_keypair() -> CurveKeys:
    public, secret = zmq.curve_keypair()
    return CurveKeys(public, secret)


def check_key_name(name: str) -> None:
    """CurveError unless ``name`` is a plain file name (a node name): its key files stay in
    the directory given."""
    if not name or "/" in name or name.startswith("."):
        raise CurveError(f"key name {name!r} must be a plain file name (a node name)")


def write_keys(directory: Path | str, name: str) -> tuple[Path, Path]:
    """Make a key pair as ``<dir>/<name>.key`` (public) and ``<name>.key_secret`` (mode 600)."""
    check_key_name(name)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    mask = os.umask(0o077)  # the secret file is never readable by others, not even briefly
    try:
        public, secret = (Path(p) for p in zmq.auth.create_certificates(out, name))
    finally:
        os.umask(mask)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)
    return public, secret


def node_key_files(out: Path | str, name: str) -> tuple[Path, Path]:
    """Where ``make_node_keys`` puts a node's pair in ``out``: (secret, public)."""
    base = Path(out)
    return base / f"{name}{SECRET_SUFFIX}", base / "public" / f"{name}{PUBLIC_SUFFIX}"


def refuse_existing_keys(out: Path | str, name: str) -> None:
    """CurveError if a key file of this node is in ``out`` already (replacing one is a choice:
    every node's keys dir must then get the new public key)."""
    for existing in node_key_files(out, name):
        if existing.exists():
            raise CurveError(f"{existing} exists already; remove it to make new keys "
                             f"(every node's keys dir must then get the new public key)")


def make_node_keys(out: Path | str, name: str, overwrite: bool = False) -> tuple[Path, Path]:
    """A node's key pair laid out for its config: ``<out>/<name>.key_secret`` (mode 600,
    ``actor.curve.secret.key.file``) and ``<out>/public/<name>.key`` (into the keys dir
    that becomes ``actor.curve.public.keys.dir``, next to the other nodes' keys)."""
    base = Path(out)
    public = node_key_files(base, name)[1]
    if not overwrite:
        refuse_existing_keys(base, name)
    try:
        made_public, made_secret = write_keys(base, name)
        public.parent.mkdir(exist_ok=True)
        os.replace(made_public, public)
    except OSError as exc:
        raise CurveError(f"cannot write keys in {base}: {exc.strerror}") from None
    return public, made_secret


def _check_key(path: Path, key: bytes | None, which: str) -> bytes:
    if key is None:
        raise CurveError(f"{path}: no {which} key in it (give the {which}-key file that "
                         f"`actorlog keys new` or zmq.auth made)")
    if len(key) != 40:
        raise CurveError(f"{path}: the {which} key is not 40 Z85 characters")
    try:
        z85.decode(key)
    except (ValueError, KeyError):
        raise CurveError(f"{path}: the {which} key is not Z85 text") from None
    return key


def read_key_file(path: Path | str, secret: bool = True) -> CurveKeys:
    """A certificate file; with ``secret`` it must hold the secret key too."""
    p = Path(path)
    if not p.is_file():
        raise CurveError(f"{p} does not exist; make keys with `actorlog keys new --out DIR`")
    try:
        public, secret_key = zmq.auth.load_certificate(p)
    except PermissionError:
        raise CurveError(f"{p}: cannot read the key file: permission denied; make it "
                         f"readable by the user the node runs as") from None
    except (OSError, ValueError) as exc:
        raise CurveError(f"{p}: not a ZeroMQ certificate file ({exc})") from None
    public = _check_key(p, public, "public")
    if not secret:
        return CurveKeys(public, b"")
    secret_key = _check_key(p, secret_key, "secret")
    mode = p.stat().st_mode & 0o777
    if mode & 0o077:
        raise CurveError(f"{p}: the secret key file may be read by others (mode "
                         f"{mode:04o}); make it private with chmod 600 {p}")
    return CurveKeys(public, secret_key)


def read_public_keys(directory: Path | str) -> dict[str, bytes]:
    """node name -> Z85 public key, from every ``*.key`` file of the directory."""
    d = Path(directory)
    if not d.is_dir():
        raise CurveError(f"actor.curve.public.keys.dir {d} is not a directory")
    out: dict[str, bytes] = {}
    for path in sorted(d.glob(f"*{PUBLIC_SUFFIX}")):
        out[path.name[:-len(PUBLIC_SUFFIX)]] = read_key_file(path, secret=False).public
    if not out:
        raise CurveError(f"actor.curve.public.keys.dir {d} has no *{PUBLIC_SUFFIX} files")
    return out


def raw_key(z85_key: bytes) -> bytes:
    """The 32 raw bytes of a Z85 key (what ZAP requests carry)."""
    return bytes(z85.decode(z85_key))


def z85_key(raw: bytes) -> str:
    return bytes(z85.encode(raw)).decode()


@dataclass(frozen=True, slots=True)
class CurveIdentity:
    """What a node's sockets need: its own key pair and every node's public key.

    ``peers`` maps runtime node names to Z85 public keys; a link to a node
    finds the server key it expects there (a node absent from it is not
    reached at all), and the gateway's ZAP handler admits exactly those keys.
    """

    keys: CurveKeys
    peers: Mapping[str, bytes]

    def server_key(self, node: str) -> bytes | None:
        return self.peers.get(node)

    def names_of(self, node: str) -> frozenset[str]:
        """The node names whose frames a peer authenticated as ``node`` may send: ``node``
        and the names sharing its key (the other processes of that broker)."""
        key = self.peers.get(node)
        if key is None:
            return frozenset()
        return frozenset(name for name, other in self.peers.items() if other == key)

    def admitted(self) -> dict[bytes, str]:
        """raw 32-byte key -> node name, for :class:`actors.security.zap.ZapPolicy`."""
        out: dict[bytes, str] = {}
        for name, key in sorted(self.peers.items(), reverse=True):  # "node-1" over "node-1-p1"
            out[raw_key(key)] = name
        return out


def cluster_mismatch(own: CurveIdentity | None, registered: Mapping[str, str]
                     ) -> tuple[str | None, list[str]]:
    """Can a node with ``own`` (None: no CURVE) join nodes registered with these keys?

    ``registered``: node name -> the CURVE key its registration carries ('' for
    none). Returns the one line a node that must not start says (nodes with and
    without CURVE cannot reach each other), and the warnings of a node that
    may: a registered key its keys dir does not hold, whose frames it refuses.
    """
    for name, key in sorted(registered.items()):
        if key and own is None:
            return (f"{name} is registered with CURVE between nodes and this node has none; "
                    f"set actor.curve.secret.key.file and actor.curve.public.keys.dir (keys "
                    f"from `actorlog cluster keys --spec FILE` or `actorlog keys new`)"), []
        if not key and own is not None:
            return (f"{name} is registered without CURVE between nodes and this node has "
                    f"it; a cluster's nodes use CURVE all or none (give {name} keys, or "
                    f"remove actor.curve.* here)"), []
    warnings = []
    if own is not None:
        for name, key in sorted(registered.items()):
            expected = own.server_key(name)
            if expected is None:
                warnings.append(f"{name} is registered with CURVE key {key}, and "
                                f"actor.curve.public.keys.dir has no {name}{PUBLIC_SUFFIX}: "
                                f"this node neither sends to it nor admits it")
            elif expected.decode() != key:
                warnings.append(f"{name} is registered with CURVE key {key}, not the "
                                f"{expected.decode()} of {name}{PUBLIC_SUFFIX} here: its "
                                f"frames are refused")
    return None, warnings


@dataclass(frozen=True, slots=True)
class CurveSettings:
    secret_key_file: str = ""
    public_keys_dir: str = ""

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> CurveSettings:
        return cls(str(values.get("actor.curve.secret.key.file") or "").strip(),
                   str(values.get("actor.curve.public.keys.dir") or "").strip())

    @property
    def enabled(self) -> bool:
        return bool(self.secret_key_file or self.public_keys_dir)

    def load(self, node_name: str) -> tuple[CurveKeys, dict[str, bytes]]:
        """This node's keys and every node's public key; :class:`CurveError` when unusable."""
        if not (self.secret_key_file and self.public_keys_dir):
            missing = ("actor.curve.secret.key.file" if not self.secret_key_file
                       else "actor.curve.public.keys.dir")
            raise CurveError(f"CURVE needs both actor.curve.secret.key.file and "
                             f"actor.curve.public.keys.dir; {missing} is not set")
        keys = read_key_file(self.secret_key_file)
        known = read_public_keys(self.public_keys_dir)
        if known.get(node_name) != keys.public:
            raise CurveError(
                f"actor.curve.public.keys.dir {self.public_keys_dir} has no {node_name}"
                f"{PUBLIC_SUFFIX} matching this node's key {self.secret_key_file}; the "
                f"cluster's key directory must hold every node's public key")
        return keys, known

    def identity(self, node_name: str, aliases: tuple[str, ...] = ()) -> CurveIdentity:
        """:meth:`load` as a :class:`CurveIdentity`; ``aliases`` (the other processes of
        this broker) share this node's key pair."""
        keys, known = self.load(node_name)
        peers = dict(known)
        for alias in aliases:
            peers.setdefault(alias, keys.public)
        return CurveIdentity(keys, peers)
