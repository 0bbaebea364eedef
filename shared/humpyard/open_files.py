"""How many client connections one ``humpyard serve`` can hold: its open-files limit,
raised as far as it may go, less a reserve (docs/security.md, "Client connections")."""

from __future__ import annotations

MAX_NOFILE = 65536
"""``serve`` raises its soft open-files limit up to the hard limit, at most to this."""


def raise_open_files_limit(limit: int = MAX_NOFILE) -> int:
    """Raise the soft open-files limit towards the hard one (at most ``limit``);
    the soft limit in force afterwards."""
    import resource
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # no such limit here
        return limit
    want = limit if hard == resource.RLIM_INFINITY else min(hard, limit)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError):
            pass
    return limit if soft == resource.RLIM_INFINITY else int(soft)


def connection_cap(configured: int | None, nofile: int) -> int:
    """Client connections ``serve`` keeps open at most: ``configured`` (``[server]
    max_connections``) or, by default, the open-files limit ``nofile`` less a reserve
    (a quarter of it, at least 64) for upstream sockets, the ledger and connections
    being refused; never more than that safe figure."""
    safe = max(8, nofile - max(64, nofile // 4))
    return safe if configured is None else min(configured, safe)
