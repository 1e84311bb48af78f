"""The per-key compile lock: at most one process builds a key at a time (also the prune lock)."""

import os
import time
from contextlib import suppress
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: filelock's msvcrt lock stands in (see KeyLock)
    fcntl = None

HAVE_FLOCK = fcntl is not None


class KeyLock:
    """An exclusive flock on a lock file, polled with a bounded wait.

    The OS drops a flock when its holder exits or is killed, so no crash leaves a stuck lock. The
    holder unlinks the file on release so locks/ does not keep one file per kernel forever; a waiter
    that then wins the lock on the unlinked inode sees that the path names another file, and retries."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = None
        self._fallback = None

    def try_acquire(self) -> bool:
        if fcntl is None:
            return self._try_fallback()
        while True:
            # O_NOFOLLOW: a link planted here must not make us create or truncate its target (ELOOP:
            # the caller degrades to an in-memory compile and says so).
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                         | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            if self._names(fd):
                self._fd = fd
                self._note_holder()
                return True
            os.close(fd)   # its last holder released and removed it just now: lock the new file

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    def release(self):
        if self._fallback is not None:
            self._fallback.release()
            self._fallback = None
            return
        if self._fd is not None:
            with suppress(OSError):
                os.unlink(self.path)   # still ours: only a holder removes the file
            os.close(self._fd)
            self._fd = None

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (pid, host, since), for timeout messages."""
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def _names(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def _note_holder(self):
        with suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {os.uname().nodename} since "
                                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)

    def _try_fallback(self) -> bool:
        import filelock
        lock = filelock.FileLock(str(self.path))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            return False
        self._fallback = lock
        return True
