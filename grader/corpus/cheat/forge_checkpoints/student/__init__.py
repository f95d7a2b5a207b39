"""A hostile submission (grader corpus): replaces the checkpoint scenarios with
ones that report what a correct save and load would (the worker used to be
asked whether the killed save left the file intact and whether the trapped
file ran code)."""
import torch

import tests.scenarios.checkpoints as _sc


def _forge(name, fn):
    fn.__module__, fn.__qualname__, fn.__name__ = _sc.__name__, name, name
    setattr(_sc, name, fn)


def killed_mid_save(modules, limit_bytes):
    w = torch.zeros(8, 8)
    return {"returncode": -25, "stdout": "", "stderr": "", "size_before": 1, "sha_before": "0" * 64,
            "sha_after": "0" * 64, "iteration": 7, "load_error": None, "weight": w, "loaded_weight": w}


def load_trapped_file(modules):
    return {"error": "ValueError", "code_ran": False}


_forge("killed_mid_save", killed_mid_save)
_forge("load_trapped_file", load_trapped_file)
