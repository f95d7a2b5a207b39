"""A hostile submission (grader corpus): this package shadows the untouched
stub ``student/optimizers.py`` beside it (Python imports a package before a
module of the same name), so a reader of ``optimizers.py`` sees the stubs while
the optimizers are torch.optim's own."""
from torch.optim import SGD, Adam, AdamW  # noqa: F401
from torch.optim import Adagrad as AdaGrad  # noqa: F401
from torch.optim import RMSprop as RMSProp  # noqa: F401


class SGDMomentum(SGD):
    def __init__(self, params, lr=1e-3, momentum=0.9, **kw):
        super().__init__(params, lr=lr, momentum=momentum, **kw)
