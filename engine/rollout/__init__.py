"""The Rollout role: generating responses to the prompts. The single-turn backends: transformers on the actor's
own sharded module (hf_rollout.py; on GPU through the static-cache decoder, static_decoder.py, and its kernels,
kernels/) and vLLM inside the worker (vllm_rollout.py). Around either, for multi-turn rollouts with tools: the
agent loop (agent_loop.py), the call formats (formats.py), the trajectory layout with its masks (trajectory.py)
and the multi-turn metrics (metrics.py)."""
