"""FolderLock: a lock file is never seen free while it is being made, so another process's clean-up of abandoned
folders cannot remove a folder whose store is starting (a two-process run once failed this way under load)."""

import fcntl

from lightfed.core.folder_lock import FolderLock, remove_abandoned


def test_a_clean_up_at_the_worst_moment_leaves_a_folder_whose_lock_is_being_taken(tmp_path, monkeypatch):
    folder = tmp_path / "lightfed-states-a"
    folder.mkdir()
    flock, calls = fcntl.flock, []

    def clean_up_first(file, operation):  # another process's clean-up, just before the lock is taken
        if not calls:
            calls.append(file)
            remove_abandoned(tmp_path, "lightfed-states-*")
        return flock(file, operation)

    monkeypatch.setattr(fcntl, "flock", clean_up_first)
    lock = FolderLock(folder)
    assert lock.acquire() and calls
    assert folder.is_dir() and lock.path.is_file()
    monkeypatch.setattr(fcntl, "flock", flock)
    remove_abandoned(tmp_path, "lightfed-states-*")  # held: it stays
    assert folder.is_dir() and not FolderLock(folder).acquire()
    lock.release()
    remove_abandoned(tmp_path, "lightfed-states-*")  # free: its process is done with it
    assert not folder.exists()
