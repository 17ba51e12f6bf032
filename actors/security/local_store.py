"""Users and ACLs of a single node (no ZooKeeper): JSON files in its data dir.

``<data dir>/security/users.json`` and ``acls.json`` hold the same things
ZooKeeper would (each user's entity config with Kafka's credential text;
each pattern's ACL entries in Kafka's ACL JSON), each entry with a version
so writes are conditional exactly as in :class:`~actors.metadata.store.SecurityMetadata`.
A write goes to a temporary file that is fsynced and renamed over the old
one, so a crash leaves either the old or the new file, never a torn one.

Only one process may write at a time: ``actorlog users add`` before the node
starts, then the node itself (AlterUserScramCredentials, CreateAcls).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.security.acl import (
    AclEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

USERS_FILE = "users.json"
ACLS_FILE = "acls.json"
FORMAT_VERSION = 1


class LocalStoreError(ValueError):
    """A security file that cannot be read or written; one-line message naming the file."""


def _entry_doc(entry: AclEntry) -> dict[str, str]:
    return {"principal": entry.principal, "permissionType": entry.permission.acl_name,
            "operation": entry.operation.acl_name, "host": entry.host}


class LocalSecurityStore:
    """:class:`~actors.metadata.store.SecurityMetadata` in files under ``directory``."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    @classmethod
    def in_data_dir(cls, data_dir: Path | str) -> LocalSecurityStore:
        return cls(Path(data_dir) / "security")

    # ------------------------------------------------------------ files
    def _read(self, name: str, key: str) -> dict[str, Any]:
        path = self.directory / name
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LocalStoreError(f"{path}: cannot read it ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
            raise LocalStoreError(f"{path}: not an actorlog security file (no {key!r} table)")
        return doc[key]

    def _write(self, name: str, key: str, table: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        tmp = path.with_suffix(".tmp")
        data = json.dumps({"version": FORMAT_VERSION, key: table}, indent=1, sort_keys=True)
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise LocalStoreError(f"{path}: cannot write it ({exc.strerror})") from None

    def _stamp(self, name: str) -> tuple[int, int, int] | None:
        """What changes whenever file ``name`` is written (it is replaced by a rename)."""
        try:
            st = os.stat(self.directory / name)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    # ----------------------------------------------------------- users
    def users_stamp(self) -> tuple[int, int, int] | None:
        return self._stamp(USERS_FILE)

    def get_users(self) -> set[str]:
        return set(self._read(USERS_FILE, "users"))

    def get_user_configs(self, user: str) -> tuple[dict[str, str], int]:
        found = self._read(USERS_FILE, "users").get(user)
        if found is None:
            return {}, -1
        return {str(k): str(v) for k, v in found["config"].items()}, int(found["version"])

    def set_user_configs(self, user: str, configs: dict[str, str], version: int) -> bool:
        table = self._read(USERS_FILE, "users")
        current = table.get(user)
        if (-1 if current is None else int(current["version"])) != version:
            return False
        if configs:
            table[user] = {"version": version + 1, "config": dict(configs)}
        else:
            table.pop(user, None)
        self._write(USERS_FILE, "users", table)
        return True

    # ------------------------------------------------------------ ACLs
    @staticmethod
    def _key(pattern: ResourcePattern) -> str:
        return f"{pattern.resource_type.zk_name}:{pattern.pattern_type.name}:{pattern.name}"

    @staticmethod
    def _pattern(key: str) -> ResourcePattern:
        kind, pattern_type, name = key.split(":", 2)
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.parse(pattern_type))

    def _decode(self, doc: dict[str, Any]) -> frozenset[AclEntry]:
        try:
            return frozenset(AclEntry(str(a["principal"]), str(a["host"]),
                                      Operation.parse(str(a["operation"])),
                                      Permission.parse(str(a["permissionType"])))
                             for a in doc["acls"])
        except (KeyError, TypeError, AclError) as exc:
            raise LocalStoreError(f"{self.directory / ACLS_FILE}: a bad ACL entry ({exc})"
                                  ) from None

    def get_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        found = self._read(ACLS_FILE, "acls").get(self._key(pattern))
        if found is None:
            return frozenset(), -1
        return self._decode(found), int(found["version"])

    def set_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                 version: int) -> bool:
        table = self._read(ACLS_FILE, "acls")
        key = self._key(pattern)
        current = table.get(key)
        if (-1 if current is None else int(current["version"])) != version:
            return False
        if entries:
            table[key] = {"version": version + 1,
                          "acls": [_entry_doc(e) for e in sorted(entries)]}
        else:
            table.pop(key, None)
        self._write(ACLS_FILE, "acls", table)
        return True

    def acls_stamp(self) -> tuple[int, int, int] | None:
        return self._stamp(ACLS_FILE)

    def get_all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        out = {}
        for key, doc in self._read(ACLS_FILE, "acls").items():
            try:
                pattern = self._pattern(key)
            except (ValueError, AclError):
                raise LocalStoreError(f"{self.directory / ACLS_FILE}: bad resource key "
                                      f"{key!r}") from None
            entries = self._decode(doc)
            if entries:
                out[pattern] = entries
        return out


if TYPE_CHECKING:
    from actors.metadata.store import SecurityMetadata

    def _satisfies_the_protocol(store: LocalSecurityStore) -> SecurityMetadata:
        return store
