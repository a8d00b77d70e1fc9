"""Triton kernels of the static-cache decoder (../static_decoder.py), GPU only: one-kernel decode attention
(decode_attention.py) and one-kernel sampling (fused_sampling.py)."""
