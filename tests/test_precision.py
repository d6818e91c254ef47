"""The tensor-core precision setting: the context, which kernels it reaches, how the tune
cache keeps its choices apart, and the tf32 builds (offline, where nvcc is installed)."""

import re
import shutil
import subprocess

import pytest

from tensorconv import cuda, ops, precision, tunecache
from tests import cu_instances

MMA_FILES = ("conv_maxpool.cu", "igemm_tf32x3.cu", "pointwise_pair.cu", "scc_tc.cu",
             "sparse_blocks_tc.cu", "sparse_tc_remainder.cu", "tucker_core_tf32x3.cu",
             "tucker_tail.cu", "winograd_conv.cu")


def test_check_and_context_nest_and_restore():
    assert precision.current() == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        precision.check("fp16")
    with pytest.raises(ValueError, match="engine_precision"):
        precision.check("bf16", "engine_precision")
    with precision.using("tf32"):
        assert precision.current() == "tf32"
        assert precision.mma_defines() == {"TC_MMA_PASSES": 1}
        with precision.using("fp32"):
            assert precision.current() == "fp32" and precision.mma_defines() == {}
        assert precision.current() == "tf32"
    assert precision.current() == "fp32"
    with pytest.raises(ValueError), precision.using("tf16"):
        pass
    # an exception inside leaves the setting as it was
    with pytest.raises(KeyError), precision.using("tf32"):
        raise KeyError
    assert precision.current() == "fp32"


def test_only_kernels_built_on_tc_mma_take_the_setting():
    on_mma = {f.name for f in cuda.kernel_dir().glob("*.cu") if cuda.uses_tensor_cores(f.name)}
    assert on_mma == set(MMA_FILES)


def test_tune_cache_keeps_each_precision_apart():
    problems = (("a", "winograd_conv.cu"), ("b", "direct_conv.cu"))
    keys = [tunecache.make_key(k, f, "p") for k, f in problems]
    whole = tunecache.kernels_version()
    with precision.using("tf32"):
        tf32_keys = [tunecache.make_key(k, f, "p") for k, f in problems]
        assert tunecache.kernels_version() != whole
    # verdicts naming a kernel without tensor-core code may still weigh one that has it
    assert all(a != b for a, b in zip(keys, tf32_keys)) and all("|tf32|" in k for k in tf32_keys)
    assert not any("tf32" in k for k in keys) and tunecache.kernels_version() == whole
    assert [tunecache.make_key(k, f, "p") for k, f in problems] == keys


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("file", MMA_FILES)
def test_tf32_build_has_a_third_of_the_mma(file, tmp_path):
    """Offline: each file compiles for one tf32 pass, rounding to nearest, and that build
    issues a third of the fp32 build's mma's (the PTX of a few 3x3 / stem instantiations)."""
    text = (cuda.kernel_dir() / file).read_text()
    sigs = cu_instances.signatures(text)
    names = [n for n in ops.FAMILIES[file].instantiations()
             if "<3, 3, " in n or "<7, 7, 2, 3, 2" in n or "true>" in n or n.count(",") < 2
             or n.startswith("scc_tc<")]
    wrapper = tmp_path / "sample.cu"
    wrapper.write_text(f'#define TC_SKIP_INSTANCES\n#include "{file}"\n' + "".join(
        f"template __global__ void {n}({sigs[n.split('<')[0]]});\n" for n in names[:4]))
    counts = {}
    for passes in (3, 1):
        out = tmp_path / f"{passes}.ptx"
        subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-ptx", f"-DTC_MMA_PASSES={passes}",
                        "-I", str(cuda.kernel_dir()), "-o", str(out), str(wrapper)],
                       check=True, capture_output=True)
        text = out.read_text()
        counts[passes] = (len(re.findall(r"mma\.sync", text)),
                          len(re.findall(r"cvt\.rna\.tf32\.f32", text)))
    mma3, rna3 = counts[3]
    mma1, rna1 = counts[1]
    assert rna3 == 0  # the fp32 build splits by masking, never rounds
    if mma3 == 0:  # tucker_tail: its chain runs on FMA tiles only
        assert mma1 == 0
        return
    assert rna1 > 0
    if file != "pointwise_pair.cu":  # unrolled alike: exactly a third
        assert 3 * mma1 == mma3
    else:  # nvcc unrolls the one-pass k loop of mma_product further: no clean ratio
        assert mma1 > 0
