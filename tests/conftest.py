import pytest


def pytest_addoption(parser):
    parser.addoption("--require-gpu", action="store_true",
                     help="error out, rather than skip GPU tests, when no GPU is present (for GPU jobs)")


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA or ROCm GPU is visible to torch"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    if config.getoption("--require-gpu"):
        raise pytest.UsageError(f"--require-gpu was given but {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
