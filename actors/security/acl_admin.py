"""CreateAcls / DeleteAcls against the store: validated, conditional, retried as Kafka does.

Each pattern's entries are one znode (or file entry) with a version; a
change reads it, edits the set and writes it back only if the version is
unchanged, retrying when another writer got there first (Kafka's
``updateResourceAcls`` loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from actors.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    ResourcePattern,
    validate_binding,
)

if TYPE_CHECKING:
    from actors.metadata.store import SecurityMetadata

WRITE_ATTEMPTS = 10


def _update(store: SecurityMetadata, pattern: ResourcePattern,
            change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]) -> frozenset[AclEntry]:
    for _attempt in range(WRITE_ATTEMPTS):
        entries, version = store.get_acls(pattern)
        changed = change(entries)
        if changed == entries or store.set_acls(pattern, changed, version):
            return changed
    raise AclError(f"the ACLs of {pattern} kept changing under {WRITE_ATTEMPTS} attempts to "
                   f"write them; try again")


def create_acls(store: SecurityMetadata, bindings: Iterable[AclBinding]) -> list[str | None]:
    """Store each binding; per binding None or the one-line reason it was refused."""
    results: list[str | None] = []
    accepted: dict[ResourcePattern, frozenset[AclEntry]] = {}
    for binding in bindings:
        try:
            validate_binding(binding)
        except AclError as exc:
            results.append(str(exc))
            continue
        results.append(None)
        accepted[binding.pattern] = accepted.get(binding.pattern, frozenset()) | {binding.entry}
    for pattern, new in accepted.items():
        _update(store, pattern, new.union)
    return results


def delete_acls(store: SecurityMetadata, filters: Iterable[AclBindingFilter]
                ) -> list[list[AclBinding]]:
    """Remove what each filter matches; per filter the bindings it removed."""
    filters = list(filters)
    deleted: list[list[AclBinding]] = [[] for _ in filters]
    for pattern in sorted(store.get_all_acls()):
        removed: set[AclEntry] = set()

        def without(entries: frozenset[AclEntry], pattern: ResourcePattern = pattern,
                    removed: set[AclEntry] = removed) -> frozenset[AclEntry]:
            removed.clear()
            removed.update(e for e in entries if any(f.matches(AclBinding(pattern, e))
                                                     for f in filters))
            return entries - removed

        _update(store, pattern, without)
        for entry in sorted(removed):
            binding = AclBinding(pattern, entry)
            for index, filter_ in enumerate(filters):
                if filter_.matches(binding):
                    deleted[index].append(binding)
    return deleted
