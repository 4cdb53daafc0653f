"""A real full file system for tests: a small tmpfs mounted (as root) on a test folder, and
a ballast file that fills it to the last block, or to all but a few blocks. Tests that need
it skip when this machine cannot mount one (not root, or no mount namespace rights)."""
from __future__ import annotations

import os
import subprocess
from typing import Optional

import pytest

BLOCK = 4096  # a tmpfs block is a memory page


class FullDisk:
    """A tmpfs of ``size`` on ``path`` (mode 0700, so that it can be a private home)."""

    def __init__(self, path: str, size: str = "32m") -> None:
        self.path = path
        self.ballast = os.path.join(path, "ballast")
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.geteuid() != 0:
            pytest.skip("a full file system needs a tmpfs mount (run as root)")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.mounted = True

    def resize(self, size: str) -> None:
        """Remount the tmpfs with another ``size`` (it must hold what is on it)."""
        done = subprocess.run(
            ["mount", "-o", f"remount,size={size}", self.path], capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, done.stderr

    def fill(self, leave_blocks: int = 0) -> None:
        """Write the ballast until the file system refuses (ENOSPC), then free
        ``leave_blocks`` blocks of it."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * BLOCK
            while True:
                try:
                    os.write(fd, block)
                except OSError:
                    break
            if leave_blocks:
                size = os.fstat(fd).st_size
                os.ftruncate(fd, max(0, size - leave_blocks * BLOCK))
        finally:
            os.close(fd)

    def free_some(self, nbytes: int) -> None:
        """Free ``nbytes`` (rounded down to whole blocks) of the ballast."""
        size = os.path.getsize(self.ballast)
        os.truncate(self.ballast, max(0, size - (nbytes // BLOCK) * BLOCK))

    def free_bytes(self) -> int:
        """Bytes free now (root's view: reserved blocks count)."""
        st = os.statvfs(self.path)
        return st.f_bfree * st.f_frsize

    def free(self) -> None:
        """Remove the ballast: the space comes back."""
        try:
            os.unlink(self.ballast)
        except FileNotFoundError:
            pass

    def free_blocks(self) -> int:
        """Blocks free now."""
        return os.statvfs(self.path).f_bfree

    def unmount(self) -> Optional[str]:
        """Unmount (lazily when still busy); returns the error, if any."""
        if not self.mounted:
            return None
        self.mounted = False
        done = subprocess.run(["umount", self.path], capture_output=True, text=True, timeout=10)
        if done.returncode == 0:
            return None
        subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=10)
        return done.stderr.strip()
