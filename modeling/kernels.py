"""Which kernels a model runs, chosen for the CPU at hand.

The same arithmetic has several fast forms on CPU, and which is fastest depends on the
CPU's matrix units. `Kernels` names the choices; `for_cpu` picks them from the CPU's
instruction sets (Linux: the `flags` of /proc/cpuinfo), from measurements made with
`benchmarks/speed/bench_kernels.py` and `benchmarks/speed/bench_training.py` (README, Performance):

  amx          Xeon with AMX (bfloat16 matmul about 4x float32): the masked-LM decoder
               in float32 with an XLA-compiled forward product.
  avx512_bf16  AVX512-BF16 without AMX, e.g. AMD EPYC Zen 4/5 (bfloat16 matmul about 2x
               float32): under a bfloat16 policy the decoder runs in bfloat16 on
               TensorFlow's (oneDNN's) kernels: 82 ms with its gradients at BERT-base's
               shapes where the float32 products take 107 (either form).
  avx2         no bfloat16 units (bfloat16 matmuls no faster than float32): as amx. In
               float32 the XLA and TensorFlow decoder products tie here (135 ms).
  plain        standard TensorFlow ops only, nothing XLA-compiled (what exports trace).

Every kind except `plain` runs GELU, LayerNorm and dropout as XLA-compiled kernels with
hand-written gradients (GELU computed in float32 inside: 3 ms where plain bfloat16 ops
take 20) and the optimizer step as one compiled kernel per variable (4x faster than
plain ops), on every CPU measured.
A model takes its `Kernels` as an argument (`BertEncoder(..., kernels=...)`, `Trainer`);
runners take `--kernels` (default auto: `for_cpu()`).
"""

from __future__ import annotations

import dataclasses
import functools

from absl import logging

from common.errors import UserError

CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class Kernels:
    """Kernel choices of a model and its training step.

    Attributes:
      name: the choice's name (a CPU kind, or "plain").
      fused_elementwise: GELU, LayerNorm and dropout as XLA-compiled kernels.
      decoder_bfloat16: under a bfloat16 policy, the masked-LM decoder product runs in
        bfloat16 (logits rounded to bfloat16, then the softmax in float32); otherwise in
        float32.
      decoder_xla: the float32 decoder's forward product is XLA-compiled.
      fused_optimizer: the optimizer step (with the gradient clipping scale) as one
        XLA-compiled kernel per variable (single-replica runs).
    """

    name: str
    fused_elementwise: bool = True
    decoder_bfloat16: bool = False
    decoder_xla: bool = True
    fused_optimizer: bool = True


CHOICES = {
    "amx": Kernels("amx"),
    "avx512_bf16": Kernels("avx512_bf16", decoder_bfloat16=True),
    "avx2": Kernels("avx2"),
    "plain": Kernels("plain", fused_elementwise=False, decoder_xla=False, fused_optimizer=False),
}
NAMES = ("auto",) + tuple(CHOICES)
# The kernels of CPUs with bfloat16 units, on which mixed bfloat16 runs faster than
# float32 (the runners' --dtype=auto picks it there).
BFLOAT16_UNITS = ("amx", "avx512_bf16")


def cpu_flags(cpuinfo: str = CPUINFO) -> frozenset[str]:
    """The instruction-set flags of the first CPU in `cpuinfo` (empty if unreadable)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def cpu_model_name(cpuinfo: str = CPUINFO) -> str:
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return "unknown"


def cpu_kind(flags: frozenset[str]) -> str:
    """ "amx", "avx512_bf16" or "avx2" (also any other CPU) from instruction-set flags."""
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    return "avx2"


@functools.lru_cache(maxsize=None)
def for_cpu(cpuinfo: str = CPUINFO) -> Kernels:
    """The kernels measured fastest on this machine's kind of CPU (logged once)."""
    flags = cpu_flags(cpuinfo)
    kernels = CHOICES[cpu_kind(flags)]
    logging.info(
        "Kernels for this CPU (%s; %s): %s",
        cpu_model_name(cpuinfo),
        " ".join(sorted(f for f in flags if f.startswith(("amx", "avx512_bf16", "avx2"))))
        or "no AVX2",
        kernels,
    )
    return kernels


def resolve(kernels: Kernels | str | None) -> Kernels:
    """A `Kernels`, a name of `NAMES`, or None (= "auto": `for_cpu()`)."""
    if isinstance(kernels, Kernels):
        return kernels
    if kernels in (None, "auto"):
        return for_cpu()
    if kernels not in CHOICES:
        raise UserError(f"unknown kernels {kernels!r}; choose one of {list(NAMES)}")
    return CHOICES[kernels]
