"""Test-wide notes.

Message type ids used by test modules (each module registers its own test
messages; ids must not collide across the suite, which imports them all):
  9001-9099 tests/runtime/node_actors.py      9101-9199 tests/runtime/test_tracing.py
  9201-9299 tests/actors/test_timer_purgatory.py
  9301-9399 tests/core/test_group_coordinator_shell.py
  9401-9499 tests/runtime/test_placement.py   9501-9599 tests/runtime/test_typed_rows.py
  9601-9699 tests/runtime/test_frame_limit.py  9701-9799 tests/actors/test_processor_bounds.py
  9801-9899 tests/actors/test_partition_shard_reads.py
  9901-9999 tests/wire/test_registry.py
"""
