"""Point-to-point and collective calls with a deadline, and faults that name the rank.

Every wait has a timeout, and attnlab's communication runs on a process group of its own
created with that timeout (same ranks and backend as the caller's), so that gloo itself aborts
an operation a missing rank never joins: the process can then exit instead of waiting for the
caller's group (whose default timeout is 30 minutes). When a rank fails inside attnlab's
distributed code it writes one line to the store under the key of that call (each call has
its own number, the same on every rank, so a failure is never blamed on an older call's
error); a rank whose wait then fails (the peer's connection closes, or the deadline passes)
reads that line and raises :class:`RankFailure` naming the rank that failed first, instead of
gloo's socket message. If the store cannot be read (the rank hosting it is gone) the error
names the peer it was waiting for.
"""

from __future__ import annotations

import datetime
import re
import time

import torch
import torch.distributed as dist

FAULT_KEY = "attnlab.distributed.fault"
DEFAULT_TIMEOUT = 300.0        # seconds any one wait may take before the call gives up

_calls: dict[str, int] = {}            # attnlab calls made so far, per process group
_groups: dict[tuple[str, float], object] = {}   # (caller's group, timeout) -> attnlab's group


class RankFailure(RuntimeError):
    __module__ = "attnlab.distributed"

    """A distributed call could not finish because a rank failed, vanished or stalled.

    ``rank`` is the rank at fault when known (else None); the message says what it did."""

    def __init__(self, message: str, rank: int | None = None):
        super().__init__(message)
        self.rank = rank


def _store():
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:           # no default group, or a torch without the helper
        return None


def _group_name(group) -> str:
    return "world" if group is None else str(getattr(group, "group_name", id(group)))


def fault_key(group=None, call: int | None = None) -> str:
    """The store key of call number ``call`` on ``group`` (default: the next call)."""
    name = _group_name(group)
    return f"{FAULT_KEY}/{name}/{_calls.get(name, 0) + 1 if call is None else call}"


def post_fault(rank: int, error: BaseException, key: str | None = None) -> None:
    """Tell the other ranks that this one failed (first writer wins; never raises). ``key``:
    the call's key (default: the next call on the world group, the one the others are
    waiting in when this rank fails outside attnlab's calls)."""
    if isinstance(error, RankFailure):          # not the origin: keep the first rank's line
        return
    store = _store()
    if store is None:
        return
    key = key or fault_key()
    try:
        line = f"rank {rank} raised {type(error).__name__}: {error}".splitlines()[0][:500]
        store.compare_set(key, "", line)         # only if nobody wrote first
    except Exception:
        pass


def read_fault(key: str | None = None) -> str | None:
    store = _store()
    if store is None:
        return None
    key = key or fault_key()
    try:
        if store.check([key]):
            return store.get(key).decode("utf-8", "replace")
    except Exception:
        return None
    return None


def _alive(group) -> bool:
    """Whether ``group`` still exists (destroy_process_group() ends every group)."""
    try:
        return group in dist.distributed_c10d._world.pg_map
    except Exception:
        return False


def _timed_group(group, timeout: float, what: str):
    """attnlab's own process group over ``group``'s ranks, created with ``timeout`` (once per
    group and timeout; every rank of the group makes the same calls, so they create it
    together). Operations on it that a rank never joins are aborted by the backend itself."""
    key = (_group_name(group), timeout)
    made = _groups.get(key)
    if made is not None and _alive(made):
        return made
    ranks = dist.get_process_group_ranks(group) if group is not None else \
        list(range(dist.get_world_size()))
    start = time.monotonic()
    try:
        made = dist.new_group(ranks, timeout=datetime.timedelta(seconds=timeout),
                              backend=dist.get_backend(group), use_local_synchronization=True)
    except Exception as error:        # a rank never arrived, or one is gone
        raise RankFailure(
            f"{what} on rank {dist.get_rank()}: the ranks {ranks} did not all reach it within "
            f"{time.monotonic() - start:.0f} s ({type(error).__name__}); a rank stalled, exited "
            "or skipped this call (every rank must make the same distributed calls)") from error
    _groups[key] = made
    return made


def _rank_in(line: str) -> int | None:
    try:
        return int(line.split()[1])
    except (IndexError, ValueError):
        return None


class Comm:
    """One call's view of the group: rank, size, global ranks of peers, the deadline for each
    wait and a count of the bytes this rank sent."""

    def __init__(self, group=None, timeout: float | None = None, what: str = "ring_attention"):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"{what} needs torch.distributed initialised: call "
                "torch.distributed.init_process_group('gloo' or 'nccl') in every process (torchrun "
                "does the rendezvous), or start the processes with attnlab.distributed.spawn")
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout = float(DEFAULT_TIMEOUT if timeout is None else timeout)
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.what = what
        self.key = fault_key(group)                   # this call's number on every rank
        _calls[_group_name(group)] = _calls.get(_group_name(group), 0) + 1
        self.caller_group = group
        self.group = group
        if self.size > 1:
            self.group = _timed_group(group, self.timeout, what)
        self.sent_bytes = 0
        self.work = 0
        self.wait_s = 0.0           # time spent blocked in waits (communication not hidden)
        self.step = "start"

    def global_rank(self, r: int) -> int:
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def isend(self, t: torch.Tensor, dst: int, tag: int):
        t = t.contiguous()
        self.sent_bytes += t.numel() * t.element_size()
        try:
            work = dist.isend(t, self.global_rank(dst), group=self.group, tag=tag)
        except Exception as error:        # posting to a peer that is already gone
            self.fail(error, dst, 0.0)
        return (work, t, dst)

    def irecv(self, t: torch.Tensor, src: int, tag: int):
        try:
            work = dist.irecv(t, self.global_rank(src), group=self.group, tag=tag)
        except Exception as error:
            self.fail(error, src, 0.0)
        return (work, t, src)

    def post(self, error: BaseException) -> None:
        """This rank failed inside the call: tell the others, under this call's key."""
        post_fault(self.rank, error, self.key)

    def wait(self, handles) -> None:
        """Wait for p2p handles from :meth:`isend` / :meth:`irecv`, each within the timeout."""
        for work, _, peer in handles:
            self._wait(work, peer)

    def _wait(self, work, peer: int | None) -> None:
        start = time.monotonic()
        try:
            work.wait(datetime.timedelta(seconds=self.timeout))
        except Exception as error:        # gloo: 'Connection closed by peer', 'Timed out ...'
            self.fail(error, peer, time.monotonic() - start)
        finally:
            self.wait_s += time.monotonic() - start

    def fail(self, error: BaseException, peer: int | None, waited: float):
        line = read_fault(self.key)
        where = f"{self.what} on rank {self.rank} ({self.step})"
        if line is not None:
            raise RankFailure(f"{where} stopped: {line}", _rank_in(line)) from error
        text = str(error)
        who = f"rank {peer}" if peer is not None else "a peer rank"
        if "imed out" in text or waited >= self.timeout * 0.99:
            raise RankFailure(
                f"{where} timed out after {waited:.0f} s waiting for {who}; it is stalled or "
                "never reached this call (every rank must make the same distributed calls); "
                "raise timeout= if a step really takes this long", peer) from error
        raise RankFailure(f"{where}: {who} closed its connection ({_gloo_words(text)}); "
                          "it crashed or exited, see its own error", peer) from error

    def all_gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every rank's list of ints (same length everywhere), within the timeout."""
        if self.size == 1:
            return [values]
        # NCCL moves CUDA tensors only; gloo takes CPU ones
        dev = (torch.device("cuda", torch.cuda.current_device())
               if dist.get_backend(self.group) == "nccl" else torch.device("cpu"))
        mine = torch.tensor(values, dtype=torch.long, device=dev)
        out = [torch.empty_like(mine) for _ in range(self.size)]
        work = dist.all_gather(out, mine, group=self.group, async_op=True)
        self._wait(work, None)
        return [t.tolist() for t in out]

    def all_to_all(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
        """``outputs[s]`` <- what rank s sent me; ``inputs[d]`` goes to rank d. Sizes may differ
        (one flat ``all_to_all_single`` with split sizes: gloo's list form needs equal ones)."""
        self.sent_bytes += sum(t.numel() * t.element_size()
                               for i, t in enumerate(inputs) if i != self.rank)
        if self.size == 1:
            outputs[0].copy_(inputs[0])
            return
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=flat_in.dtype,
                               device=flat_in.device)
        work = dist.all_to_all_single(flat_out, flat_in,
                                      output_split_sizes=[t.numel() for t in outputs],
                                      input_split_sizes=[t.numel() for t in inputs],
                                      group=self.group, async_op=True)
        self._wait(work, None)
        for t, part in zip(outputs, torch.split(flat_out, [t.numel() for t in outputs])):
            t.copy_(part.view(t.shape))


def _gloo_words(text: str) -> str:
    """What the transport said, without its source location or advice: ``"[.../pair.cc:537]
    Read error [127.0.0.1]:54444: Connection reset by peer. This is ..."`` -> ``"Read error:
    Connection reset by peer"``."""
    line = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0] if text else "")
    line = re.sub(r"\s*\[[\d.:a-fA-F]+\]:\d+", "", line)       # the peer's address
    return line.split(". ")[0][:160] or type(text).__name__


def guarded(comm: Comm, fn, *args, **kwargs):
    """Run ``fn``; if it raises, post the fault for the other ranks, then re-raise."""
    try:
        return fn(*args, **kwargs)
    except BaseException as error:
        comm.post(error)
        raise
