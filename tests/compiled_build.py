"""Whether this test run imports the compiled core (the ``compiled`` package's build).

For the few tests that hand a value of the wrong type to a policy or model on
purpose: a compiled module refuses it at the call (a ``TypeError`` naming the
type) before the code's own check can answer, and stores ``True`` given for an
``int`` as 1, so a check for booleans cannot see it. Those cases run on the
pure-Python pass of ``scripts/test`` only.
"""

from __future__ import annotations

import importlib.machinery

import model.execution

COMPILED = str(model.execution.__file__).endswith(importlib.machinery.EXTENSION_SUFFIXES[0])
