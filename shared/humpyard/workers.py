"""``humpyard serve --workers N``: N worker processes on one port, one state file.

The parent process serves nothing itself. It

- checks the configuration (a bad file: exit 1, nothing started) and that it
  names a store several processes can share: a ``[ledger] path`` on the disk
  (the workers share everything through that SQLite file,
  ``SharedSQLiteStore``: breakers and probe leases, latency, overrides, spend,
  the ledger) or ``[store] backend = "dynamodb"`` (each worker opens the
  tables as one ``serve`` process does, ``fleet.py``; the parent opens them
  once first, so missing credentials or a missing table refuse the start);
  a file that names neither (no ledger: one process would keep its state in
  memory) gets a private state file for the run (``RunDir``);
- makes the run's directory (``RunDir``: a new temporary directory, removed
  when the parent exits) where each worker keeps the snapshot of its metrics
  that ``/metrics`` merges (``metrics/sharing.py``), and the private state
  file when there is one;
- empties a SQLite file's live state (breakers, latency), so a start of the
  whole set starts every endpoint healthy as one process does (DynamoDB's is
  shared with other machines and the Lambda functions, and left alone);
- binds the listening socket once and hands it to every worker (inherited
  by file descriptor: the kernel gives each new connection to one worker
  that is accepting; connections waiting in the queue survive a worker's
  death, which SO_REUSEPORT's per-socket queues would reset);
- starts each worker as ``humpyard serve --worker-fd FD`` and restarts one
  that exits without being told to (after ``RESTART_BACKOFF_SECS``, doubled
  up to ``MAX_RESTART_BACKOFF_SECS`` while it keeps dying within
  ``STABLE_SECS`` of its start); each start names the worker's instance in the
  store (``--worker-instance``), so that when a worker dies without its
  shutdown the parent gives back, on a SQLite file, the budget leases,
  per-key limit slots and probe leases it held (``give_back``) instead of
  leaving them to count until their lease expires (on DynamoDB only the probe
  leases, in a thread: the breakers are one item, while no one process can
  find all the keys' items);
- hands every worker the configuration it checked, not the file: the texts
  of the file and of those it includes, as read for the check, are published
  in the run's directory (``published_config.py``), and a worker loads those, at
  its start (a restarted one too) and at each reload, so no worker ever runs
  an edit the parent did not check or a file edited between the parent's
  check and the worker's read; with them the store the run opened, which
  every worker keeps whatever a reloaded file names (a change of store takes
  a restart: ``config/stores.py``);
- on SIGHUP (and, with ``reload_poll_secs``, when the files' modification
  stamps change: the parent watches them, the workers do not) loads the file
  first: a valid one is published and passed on as SIGHUP to every worker
  (each reloads what was published), a bad one is logged and no worker is
  told, so the old configuration keeps serving everywhere;
- on SIGTERM or SIGINT passes SIGTERM to every worker, each drains its
  requests (stopping those still open after ``[server] stop_timeout_secs``, each
  recorded) and closes its ledger writer, waits for them all and exits 0 (a
  worker still running ``DRAIN_MARGIN_SECS`` after that is killed).

A worker writes a byte to its parent every second from its event loop
(``worker_side.beat``, a pipe of its own); one silent for ``[server]
worker_timeout_secs`` (its loop stuck, or the process frozen) is killed and
started again like a worker that died, since the connections the kernel hands
it would hang. A worker notices its parent is gone (killed with SIGKILL)
within a second and stops as on SIGTERM. What the workers share on the disk
(the store check, the run's directory, emptying live state, giving back a
dead worker's leases) is ``worker_state.py``.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from humpyard.cli_args import CANNOT_LISTEN, cannot_listen, listening_socket
from humpyard.config import load_config
from humpyard.config.files import ConfigFiles
from humpyard.config.spec import Config, ServerSpec
from humpyard.config.stores import keep_store, store_named
from humpyard.errors import ConfigError, HumpyardError
from humpyard.logsink import drain_all
from humpyard.published_config import publish_config
from humpyard.reload import FileWatch
from humpyard.stopping import asked_early
from humpyard.worker_state import (
    RunDir,
    check_shared_config,
    give_back,
    give_back_probes,
    reset_live_state,
    reset_quietly,
)

log = logging.getLogger("humpyard.workers")

RESTART_BACKOFF_SECS = 0.5
MAX_RESTART_BACKOFF_SECS = 10.0
STABLE_SECS = 10.0
STARTUP_SECS = 30.0  # a new worker's allowance, beyond the timeout, before its first beat
DRAIN_MARGIN_SECS = 30.0  # beyond [server] stop_timeout_secs: the ledger written out
POLL_SECS = 0.05
PARENT_GAP_SECS = 1.0  # the parent's own loop silent this long: it was stopped itself


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    instance: str = ""  # its name in the store, new at each start
    started: float = 0.0
    backoff: float = RESTART_BACKOFF_SECS
    beats: int | None = None  # the read end of its sign-of-life pipe (worker_side.beat)
    heard: float = 0.0  # when it last wrote there (or its start plus STARTUP_SECS)
    due: float = 0.0  # when a dead worker is started again
    restarts: int = field(default=0)


class Supervisor:
    """The parent of ``--workers N`` (see the module docstring)."""

    def __init__(self, config_path: str, host: str, port: int, count: int, *,
                 argv: Sequence[str] = (), serve_args: Sequence[str] = ()) -> None:
        self.config_path = config_path
        self.host = host
        self.port = port
        self.workers = [_Worker(i) for i in range(count)]
        self.argv = tuple(argv)  # the global flags each worker gets (log level)
        self.serve_args = tuple(serve_args)  # and the serve flags (log format)
        self._stopping = False
        self._reload = False
        self.sock: socket.socket | None = None
        self.run_dir: RunDir | None = None
        self.config: Config | None = None  # the last one checked and published
        self._generation = 0
        self._listened = time.monotonic()  # when ``_listen`` last ran
        self._watch = FileWatch(config_path)  # reload_poll_secs: the parent watches
        self._next_poll = 0.0
        self._state_file: str | None = None  # the SQLite file the workers share, if any
        self._store: dict[str, Any] = {}  # the store the run opened (config/stores.py)

    def _command(self, fd: int, beat: int, w: _Worker) -> list[str]:
        assert self.run_dir is not None
        state = ["--worker-state", self.run_dir.state] if self.run_dir.state else []
        return [sys.executable, "-m", "humpyard.cli", *self.argv, "serve",
                "--config", self.config_path, "--host", self.host, "--port", str(self.port),
                *self.serve_args, "--worker-fd", str(fd), "--worker-dir", self.run_dir.dir,
                "--worker-index", str(w.index), "--worker-instance", w.instance,
                "--worker-beat", str(beat), *state]

    def _start(self, w: _Worker) -> None:
        assert self.sock is not None
        fd = self.sock.fileno()
        # A session of its own: a terminal's Ctrl-C reaches the parent only, which
        # then stops each worker once (a second signal would cut its drain short).
        w.instance = f"w{w.index}-{secrets.token_hex(4)}"
        beats, beat = os.pipe()
        os.set_blocking(beats, False)
        try:
            w.proc = subprocess.Popen(self._command(fd, beat, w), pass_fds=(fd, beat),
                                      start_new_session=True)
        except BaseException:
            os.close(beats)
            raise
        finally:
            os.close(beat)
        w.beats = beats
        w.started = time.monotonic()
        w.heard = w.started + STARTUP_SECS
        log.info("worker %d started pid=%d instance=%s", w.index, w.proc.pid, w.instance,
                 extra={"worker": w.index, "pid": w.proc.pid})

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT: 0; a bad configuration: 1; no address: 3."""
        try:
            files = ConfigFiles()
            self._watch.mark(())  # taken first: an edit after it is reloaded, not missed
            cfg = self.config = load_config(self.config_path, files=files)
            if cfg.includes:
                self._watch.mark(cfg.includes)
            backend = check_shared_config(cfg)
            if backend == "sqlite":
                reset_live_state(cfg)
            self.run_dir = RunDir(state=backend == "memory")
            if backend == "sqlite":
                assert cfg.ledger is not None and cfg.ledger.path is not None
                self._state_file = os.path.expanduser(cfg.ledger.path)
            else:
                self._state_file = self.run_dir.state  # None on DynamoDB
            self._store = store_named(cfg)
            publish_config(self.run_dir.dir, files, self._generation, self._store)
            if self.run_dir.state is not None:
                log.info("no ledger configured: the workers share a state file of their own "
                         "for this run, removed at exit (%s); overrides are refused and only "
                         "the newest decisions are kept, as in one process", self.run_dir.state)
        except (HumpyardError, OSError) as e:  # a bad file, an unwritable ledger
            print(e, file=sys.stderr)
            self._close_run_dir()
            return 1
        try:
            self.sock = listening_socket(self.host, self.port)
        except OSError as e:  # a taken port, a host that does not resolve
            print(cannot_listen(self.host, self.port, e), file=sys.stderr)
            self._close_run_dir()
            return CANNOT_LISTEN
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        self._stopping = self._stopping or asked_early()  # it came while starting
        if self._stopping:
            log.info("humpyard stopped while starting: no worker started")
        else:
            log.info("humpyard serving on http://%s:%d with %d workers (config %s)",
                     f"[{self.host}]" if ":" in self.host else self.host,  # an IPv6 address
                     self.sock.getsockname()[1], len(self.workers), self.config_path)
            for w in self.workers:
                self._start(w)
        self._listened = time.monotonic()
        try:
            while not self._stopping:
                if self._reload:
                    self._reload = False
                    self._reload_all()
                self._poll_files()
                self._listen()
                self._reap()
                drain_all()  # its INFO lines (a worker started) now, not at exit
                time.sleep(POLL_SECS)
        finally:
            # Its copy of the listening socket goes first: the workers close theirs as
            # they stop accepting, and a connection the kernel still queued for nobody
            # would wait out the drain (up to stop_timeout_secs) before its reset.
            self.sock.close()
            self._stop_all()
            self._close_run_dir()
            if backend == "sqlite":  # a console on the file shows no breakers of this run
                reset_quietly(cfg)  # the file the run started on (a reload keeps it)
        log.info("humpyard stopped")
        return 0

    def _close_run_dir(self) -> None:
        if self.run_dir is not None:
            self.run_dir.close()
            self.run_dir = None

    def _on_stop(self, signum: int, frame: object) -> None:
        self._stopping = True

    def _on_hup(self, signum: int, frame: object) -> None:
        self._reload = True

    def _reload_all(self) -> None:
        """Check the file here first; only a valid one is published and reaches the
        workers, which load what was published, never the file."""
        assert self.run_dir is not None and self.config is not None
        files = ConfigFiles()
        self._watch.mark(self.config.includes)
        try:
            cfg = load_config(self.config_path, files=files)
        except ConfigError as e:
            log.error("reload rejected; every worker keeps the previous configuration: %s", e)
            return
        if cfg.includes != self.config.includes:
            self._watch.mark(cfg.includes)
        _, kept = keep_store(cfg, self._store)  # each worker keeps it: said here, once
        if kept is not None:
            log.warning("%s", kept)
        self._generation += 1
        try:
            publish_config(self.run_dir.dir, files, self._generation, self._store)
        except OSError as e:
            log.error("reload not published; every worker keeps the previous "
                      "configuration: %s", e)
            return
        self.config = cfg
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGHUP)
        log.info("configuration checked; reload sent to %d workers", len(self.workers))

    def _poll_files(self) -> None:
        """With ``reload_poll_secs``, reload when the files changed and held still
        (``FileWatch``; what ``serve`` does in one process: here the parent watches for
        every worker)."""
        every = self.config.reload_poll_secs if self.config is not None else 0
        now = time.monotonic()
        if every <= 0 or now < self._next_poll:
            return
        self._next_poll = now + every
        assert self.config is not None
        if self._watch.due(self.config.includes):
            self._reload_all()

    def _listen(self) -> None:
        """Note each worker's sign of life (``worker_side.beat``); kill one silent for
        ``[server] worker_timeout_secs``: its event loop is stuck (or the process is
        frozen), and the connections the kernel hands it would hang. ``_reap`` then
        starts another as for any worker that died."""
        assert self.config is not None
        timeout = self.config.server.worker_timeout_secs
        now = time.monotonic()
        gap, self._listened = now - self._listened, now
        if gap > PARENT_GAP_SECS:
            # The parent was not running (stopped or frozen with its workers, as in a
            # paused container): that time is nobody's silence. Without this, a parent
            # thawed before its workers killed every one of them.
            for w in self.workers:
                w.heard += gap
        for w in self.workers:
            if w.proc is None or w.beats is None:
                continue
            try:
                if os.read(w.beats, 4096):
                    w.heard = now
            except BlockingIOError:
                pass
            if now - w.heard > timeout and w.proc.poll() is None:
                log.error("worker %d (pid %d) has not answered for %.0f s "
                          "([server] worker_timeout_secs): its event loop is stuck; "
                          "killing it", w.index, w.proc.pid, now - w.heard,
                          extra={"worker": w.index, "pid": w.proc.pid})
                w.proc.kill()
                w.heard = float("inf")  # killed once; _reap restarts it

    def _reap(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is None:
                if now >= w.due and not self._stopping:
                    w.restarts += 1
                    self._start(w)
                continue
            code = w.proc.poll()
            if code is None:
                continue
            log.error("worker %d (pid %d) exited with %s; restarting it", w.index, w.proc.pid,
                      code, extra={"worker": w.index, "pid": w.proc.pid})
            if w.beats is not None:
                os.close(w.beats)
                w.beats = None
            if self._state_file is not None:
                give_back(self._state_file, w.instance)
            elif self.config is not None:  # DynamoDB: its probe leases, off this loop
                run_config, _ = keep_store(self.config, self._store)
                threading.Thread(target=give_back_probes, args=(run_config, w.instance),
                                 name="humpyard-give-back", daemon=True).start()
            if now - w.started < STABLE_SECS:
                w.backoff = min(w.backoff * 2, MAX_RESTART_BACKOFF_SECS)
            else:
                w.backoff = RESTART_BACKOFF_SECS
            w.proc, w.due = None, now + w.backoff

    def _stop_all(self) -> None:
        running = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        # a worker stops its own open requests after stop_timeout_secs, recording them
        server = self.config.server if self.config is not None else ServerSpec()
        drain = server.stop_timeout_secs + DRAIN_MARGIN_SECS
        deadline = time.monotonic() + drain
        for p in running:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker pid %d still running after %.0f s; killing it", p.pid,
                          drain)
                p.kill()
                p.wait()
