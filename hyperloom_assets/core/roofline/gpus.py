"""The one GPU table of the project, read by the sim engine and the roofline.

Dense (no sparsity) peak throughput per GPU, from the vendors' datasheets named beside
each entry. Pure data.
"""

from __future__ import annotations

from hyperloom_assets.core.models import Frozen


class GpuSpec(Frozen):
    name: str
    memory_gb: float  # HBM capacity, GB (1e9 bytes)
    mem_bw_gbps: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense BF16 peak
    fp8_tflops: float  # dense FP8 peak
    source: str


GPUS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        GpuSpec(name="H100", memory_gb=80, mem_bw_gbps=3350, bf16_tflops=989.4, fp8_tflops=1978.9,
                source="NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (sparsity figures halved)"),
        GpuSpec(name="H200", memory_gb=141, mem_bw_gbps=4800, bf16_tflops=989.4, fp8_tflops=1978.9,
                source="NVIDIA H200 Tensor Core GPU datasheet, SXM column (sparsity figures halved)"),
        GpuSpec(name="B200", memory_gb=180, mem_bw_gbps=8000, bf16_tflops=2250, fp8_tflops=4500,
                source="NVIDIA HGX B200 datasheet, per GPU (dense)"),
        GpuSpec(name="MI300X", memory_gb=192, mem_bw_gbps=5300, bf16_tflops=1307.4, fp8_tflops=2614.9,
                source="AMD Instinct MI300X accelerator data sheet (dense)"),
        GpuSpec(name="MI325X", memory_gb=256, mem_bw_gbps=6000, bf16_tflops=1307.4, fp8_tflops=2614.9,
                source="AMD Instinct MI325X accelerator data sheet (dense)"),
        GpuSpec(name="MI355X", memory_gb=288, mem_bw_gbps=8000, bf16_tflops=2516.6, fp8_tflops=5033.2,
                source="AMD Instinct MI355X accelerator data sheet (dense)"),
    )
}


def gpu_spec(name: str) -> GpuSpec:
    """A GPU by name (case-insensitive); the error lists the known names."""
    for key, spec in GPUS.items():
        if key.lower() == name.lower():
            return spec
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
