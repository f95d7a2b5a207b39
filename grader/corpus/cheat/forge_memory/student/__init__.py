"""A hostile submission (grader corpus): replaces the scenarios that used to
measure memory inside the worker (tracemalloc, the resident set, a
saved-tensors hook) with ones that report small numbers."""
import tests.scenarios.data as _data
import tests.scenarios.training as _training


def _forge(module, name, fn):
    fn.__module__, fn.__qualname__, fn.__name__ = module.__name__, name, name
    setattr(module, name, fn)


def memmap_footprint(modules, n_tokens, batch_size, context_length, seed):
    import torch

    x = torch.zeros(batch_size, context_length, dtype=torch.int64)
    return {"file_bytes": n_tokens * 2, "traced_peak": 1, "rss_growth": 1, "x": x, "y": x.clone()}


_real_checkpointed = _training.checkpointed


def checkpointed(modules, kind, dim, num_layers, seed, x, *args, **kwargs):
    out = _real_checkpointed(modules, kind, dim, num_layers, seed, x, *args, **kwargs)
    out["saved_bytes"] = 0
    return out


_forge(_data, "memmap_footprint", memmap_footprint)
_forge(_training, "checkpointed", checkpointed)
