"""Who may write the cache: only its owner. The checks hkjit makes before it reads or writes a cache
folder, and the 0700 folder creation it uses for every level it makes.

Decisions (docs/deployment.md, "Threat model"):
* A folder owned by another user (root excepted, as ssh does) is refused: its owner can swap any
  file in it.
* A world-writable folder is refused even with the sticky bit: sticky only stops others renaming
  or removing files they do not own; they can still create the names hkjit has not made yet (an
  entries/ fan-out folder, an index record, a lock) and so plant kernels. Group-writable is
  allowed: a group sharing one cache is a deliberate choice of people who trust each other.
* The root may be a symbolic link the user made (the check follows it and judges the target);
  folders below it are hkjit's own and must be real folders."""

import os
import stat
from pathlib import Path

from ..errors import UnsafeCacheError


def _my_uid() -> int:
    return os.geteuid()


def check_private(path: Path, *, follow: bool) -> None:
    """Raise UnsafeCacheError when another user can write the folder `path`; a missing one is fine."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError:
        return   # unreadable: the cache degrades to memory on first use and says so
    fix = (f"Fix: if the folder is yours, `chmod 700 {path}`; otherwise point HKJIT_CACHE_DIR at a "
           "private folder of your own (hkjit creates it 0700).")
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeCacheError(f"hkjit cache folder {path} is a symbolic link (to {os.readlink(path)}); "
                               f"hkjit made a folder there, someone replaced it. {fix}")
    if not stat.S_ISDIR(st.st_mode):
        return   # not a folder: the first write fails and the cache degrades to memory
    if st.st_uid not in (_my_uid(), 0):
        raise UnsafeCacheError(f"hkjit cache folder {path} is owned by uid {st.st_uid}, not by you "
                               f"(uid {_my_uid()}): its owner could make this process run any code. {fix}")
    if st.st_mode & stat.S_IWOTH:
        raise UnsafeCacheError(f"hkjit cache folder {path} is writable by every user (mode "
                               f"{stat.S_IMODE(st.st_mode):o}; the sticky bit does not make a cache safe): "
                               f"anyone could plant kernels in it. {fix}")


def make_private_dirs(path: Path) -> list[Path]:
    """Create `path` and each missing parent with mode 0700 (Path.mkdir(parents=True) gives the
    parents the umask's default, e.g. 0755). Folders that already exist are left as they are: hkjit
    changes the mode of nothing it did not create. Returns the folders it created."""
    missing = []
    current = Path(path)
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    created = []
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
            created.append(folder)
        except FileExistsError:
            pass   # made by a concurrent process: not ours to judge here
    return created
