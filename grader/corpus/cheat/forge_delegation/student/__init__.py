"""A hostile submission (grader corpus): its optimizers are torch.optim's own,
reached by name, and it replaces the scenario that used to spy on torch.optim
inside the worker with one that reports a clean bill."""
import tests.scenarios.optimizers as _sc


def delegation_facts(modules, name, params, groups, defaults, grads_per_step):
    ps = _sc._parameters(params)
    opt = _sc.build(modules, name, ps, groups, defaults)
    return {"mro": [f"student.optimizers.{name}", "torch.optim.optimizer.Optimizer", "builtins.object"],
            "torch_optim_calls": [], "trajectory": _sc.run_steps(opt, ps, grads_per_step, None)}


delegation_facts.__module__, delegation_facts.__qualname__ = _sc.__name__, "delegation_facts"
_sc.delegation_facts = delegation_facts
