"""bfloat16 fields in the arrays flumen hands out.

Arrow has no bfloat16 type, so flumen carries a bfloat16 field's values as their 16 bits
(uint16). Iterating a dataset views them as the array library's own bfloat16: PyTorch's
``torch.bfloat16``, JAX's ``jnp.bfloat16``, and for NumPy ``ml_dtypes.bfloat16`` (installed
with JAX and TensorFlow). Without ml_dtypes, NumPy arrays keep the uint16 bits.
"""


def _view(array):
    module = type(array).__module__
    if module.startswith("torch"):
        import torch

        return array.view(torch.bfloat16)
    if module.startswith(("jax", "jaxlib")):
        import jax.numpy as jnp

        return array.view(jnp.bfloat16)
    if hasattr(array, "view") and getattr(array, "dtype", None) is not None and array.dtype.kind == "u":
        try:
            import ml_dtypes
        except ImportError:
            return array
        return array.view(ml_dtypes.bfloat16)
    return array


def view(value):
    """``value``, a field as the iterator gives it, with its uint16 bits viewed as bfloat16:
    an array, a ragged field's ``(values, offsets)`` or a sparse field's ``SparseTensor``.
    Python lists (fields with nulls) are left as they are."""
    if isinstance(value, tuple) and len(value) == 2:
        return (_view(value[0]), value[1])
    if isinstance(value, tuple) and len(value) == 3:
        return type(value)(value[0], _view(value[1]), value[2])
    return _view(value)
