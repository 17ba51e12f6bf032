"""Nothing but the names tests imported from here before the fixtures moved.

The traced-broker and Spark fixtures live in tests/fixtures/traces.py and are
declared in tests/conftest.py; this module only keeps ``from
tests.trace.conftest import PRODUCED`` working for code written before the
move. New code imports tests.fixtures.traces.
"""

from tests.fixtures.traces import PRODUCED, TOPIC

__all__ = ["PRODUCED", "TOPIC"]
