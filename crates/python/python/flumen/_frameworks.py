"""Converters from flumen columns to framework tensors, used by ``Dataset.iter_torch`` and
``Dataset.iter_jax``: each takes a ``flumen.Column`` (which speaks DLPack) and returns the
framework's tensor over the same memory."""


def torch_converter(device=None):
    """``torch.from_dlpack``, then ``.to(device)`` when a device is given."""
    import torch

    if device is None:
        return torch.from_dlpack
    device = torch.device(device)

    def convert(column):
        return torch.from_dlpack(column).to(device)

    return convert


def jax_converter(device=None):
    """``jax.numpy.from_dlpack``, then ``jax.device_put(…, device)`` when one is given."""
    import jax
    import jax.numpy as jnp

    if device is None:
        return jnp.from_dlpack

    def convert(column):
        return jax.device_put(jnp.from_dlpack(column), device)

    return convert
