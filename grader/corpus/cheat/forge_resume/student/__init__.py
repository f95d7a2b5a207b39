"""A hostile submission (grader corpus): replaces the resume scenario (which
used to run the uninterrupted and the resumed run in one worker and report
both) with one that reports the uninterrupted run twice; and makes the
scenario that continues from a checkpoint rerun the whole run from the seed
the public test used to use, instead of loading."""
import tests.scenarios.checkpoints as _sc


def _forge(name, fn):
    fn.__module__, fn.__qualname__, fn.__name__ = _sc.__name__, name, name
    setattr(_sc, name, fn)


def resume(modules, kind, dim, num_layers, batch, total, split, seed, precision="fp32"):
    whole = _sc.train_run(modules, kind, dim, num_layers, batch, total, seed, precision)
    return {"whole": whole["losses"], "resumed": list(whole["losses"]), "iteration": split,
            "whole_params": whole["params"], "resumed_params": whole["params"]}


def resume_run(modules, kind, dim, num_layers, batch, total, other_seed, path, precision="fp32"):
    split = 4
    whole = _sc.train_run(modules, kind, dim, num_layers, batch, total, 123, precision)
    return {"iteration": split, "losses": whole["losses"][split:], "params": whole["params"]}


_forge("resume", resume)
_forge("resume_run", resume_run)
