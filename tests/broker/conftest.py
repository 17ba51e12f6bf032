"""Nothing but the names tests imported from here before the fixtures moved.

The broker helpers live in tests/fixtures/broker.py and every fixture is
declared in tests/conftest.py; this module only keeps ``from
tests.broker.conftest import BrokerProcess`` working for code written before
the move. New code imports tests.fixtures.broker.
"""

from tests.fixtures.broker import ROOT, BrokerProcess, free_port

__all__ = ["ROOT", "BrokerProcess", "free_port"]
