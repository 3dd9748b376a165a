"""Ending processes for good: the trainer's leftovers (a hung reward's children) and a launcher's whole
tree (torchrun's ranks run in sessions of their own, so a group signal does not reach them)."""

from __future__ import annotations


def end_processes(procs: list, grace_s: float = 0.0, wait_s: float = 10.0) -> list[str]:
    """SIGTERM each psutil process and give them `grace_s` to exit (skipped when 0), then SIGKILL the rest
    and wait up to `wait_s`. Returns 'name (pid N)' for each process it was given."""
    import psutil

    named = []
    for proc in procs:
        try:
            named.append(f"{proc.name()} (pid {proc.pid})")
        except psutil.Error:
            pass
    left = list(procs)
    if grace_s > 0:
        for proc in left:
            try:
                proc.terminate()
            except psutil.Error:
                pass
        _, left = psutil.wait_procs(left, timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=wait_s)
    return named


def end_tree(pid: int) -> list[str]:
    """SIGKILL a process and all its descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        return end_processes([*root.children(recursive=True), root])
    except psutil.Error:
        return []


def end_children(grace_s: float = 3.0) -> list[str]:
    """End the processes this one started that are still there: terminated, then killed after `grace_s`."""
    import psutil

    return end_processes(psutil.Process().children(recursive=True), grace_s=grace_s)
