"""Run work in a forked worker process that cannot hang its caller.

egglog cannot be interrupted in-process (one iteration was measured at 34 s), so the
optimizer saturates in a child process that posts its best result so far as it goes. The
parent waits until the child is done or the deadline passes, then kills it and keeps the
last result. Messages are pickled over a pipe: `("interim" | "done", payload)` or
`("error", exception)`, pickled plainly so that tensors travel as bytes. (A process pool
with timeouts, pebble's or loky's, returns only a final result: the interim results that
make a deadline useful are why this is a pipe of its own.)
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Post = Callable[[Any], None]


@dataclass
class Outcome:
    payload: Any  # the last result posted (None if none came)
    finished: bool  # the work returned normally
    seconds: float


def can_fork() -> bool:
    return "fork" in mp.get_all_start_methods()


def run_isolated(work: Callable[[Post], Any], deadline: float,
                 meanwhile: Callable[[], None] = lambda: None) -> Outcome:
    """`work(post)` in a forked child; `post(x)` publishes an interim result. The parent
    does `meanwhile()` while the child works; the deadline counts from its end."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(work, send), daemon=True)
    _fork(child)
    send.close()
    try:
        meanwhile()
    except BaseException:
        child.kill()
        child.join()
        receive.close()
        raise
    return _collect(child, receive, deadline)


@dataclass
class Pending:
    """A child forked ahead of its input, preparing (imports, loading) meanwhile."""

    child: Any
    inbox: Any  # the parent's end of the pipe that carries the input
    receive: Any  # the parent's end of the pipe that carries results

    def send(self, data: Any) -> None:
        """The input: the child computes `run(data, post)` once it has prepared."""
        payload = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
        with contextlib.suppress(BrokenPipeError, OSError):  # a child that died preparing
            self.inbox.send_bytes(payload)  # has left its error in the results pipe
        self.inbox.close()

    def collect(self, deadline: float) -> Outcome:
        """Its results, as `run_isolated` collects them."""
        self.inbox.close()
        return _collect(self.child, self.receive, deadline)

    def cancel(self) -> None:
        if self.child.is_alive():
            self.child.kill()
        self.child.join()
        self.inbox.close()
        self.receive.close()


def prestart(prepare: Callable[[], Callable[[Any, Post], Any]]) -> Pending:
    """Fork a child now that runs `run = prepare()` while the caller goes on, then waits
    for its input (`Pending.send`). What the child prepares costs the caller nothing on a
    machine with a core to spare."""
    ctx = mp.get_context("fork")
    data_end, inbox = ctx.Pipe(duplex=False)
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(functools.partial(_prepared, prepare, data_end),
                                             send), daemon=True)
    _fork(child)
    send.close()
    data_end.close()
    return Pending(child, inbox, receive)


def _prepared(prepare, data_end, post: Post) -> Any:
    run = prepare()
    data = pickle.loads(data_end.recv_bytes())
    return run(data, post)


def _fork(child) -> None:
    with warnings.catch_warnings():
        # torch's idle pool threads exist in the parent; the child runs single-threaded
        # (see `_child`) and never touches them, so fork is safe here and far cheaper than
        # spawning a fresh interpreter that would import torch again.
        warnings.simplefilter("ignore", DeprecationWarning)
        child.start()


def _collect(child, receive, deadline: float) -> Outcome:
    """Results from `child` until it is done or `deadline` seconds have passed."""
    start = time.perf_counter()
    last, finished = None, False
    try:
        while True:
            left = deadline - (time.perf_counter() - start)
            if left <= 0 or not receive.poll(min(left, 0.5)):
                if left <= 0 or not child.is_alive() and not receive.poll(0):
                    break
                continue
            try:
                kind, payload = pickle.loads(receive.recv_bytes())
            except EOFError:
                break
            if kind == "error":
                raise payload
            last = payload
            if kind == "done":
                finished = True
                break
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    return Outcome(last, finished, time.perf_counter() - start)


def _send(conn, kind: str, payload: Any) -> None:
    """Plain pickle: tensors travel as bytes, not as file descriptors the child owns."""
    conn.send_bytes(pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL))


def _child(work: Callable[[Post], Any], send) -> None:
    import torch

    torch.set_num_threads(1)  # the parent's OpenMP pool does not survive fork()
    try:
        result = work(lambda payload: _send(send, "interim", payload))
        _send(send, "done", result)
    except BaseException as e:  # egglog panics are BaseExceptions
        try:
            _send(send, "error", e)
        except Exception:
            _send(send, "error", RuntimeError(f"{type(e).__name__}: {e}"))
    finally:
        send.close()
        os._exit(0)
