"""TileLang MLA decode kernels (imported as ``mlagate.kernels``; the folder
name alone would collide with PyPI's unrelated ``kernels`` package)."""
