"""The hostile-input suite: each attack on the gateway as a test over real sockets.

A hostile upstream (bombs, endless lines, stalls, floods), a hostile client
(slowloris, huge headers, idle connections, floods without a key, early
disconnects) and a store held by another process; during each, a probe client
(``tests/support/probe.py``) must be served with flat latency, and the
gateway's memory must stay bounded. docs/security.md lists each limit and the
test that holds it.
"""
