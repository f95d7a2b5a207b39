"""Reaches the fork server the worker was forked from (its parent: pid 1 of
bubblewrap's namespace, or the uid mode's server) and lowers its open-file
limit to 3: the server could then take no more descriptors, and every later
spawn (the next problem's worker) would fail, which a grader that blames
the machine for a failed spawn reports as its own fault. The answer itself
is wrong, so that the item is lost either way."""
import os
import resource


def reach_the_server(function):
    def attack(*args, **kwargs):
        value = function(*args, **kwargs)
        try:
            resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))
            print("SERVER REACHED", flush=True)
        except OSError as e:
            print(f"REFUSED {e}", flush=True)
        return value + 1
    return attack
