"""Multi-turn rollouts: the agent loop (agent_loop.py) between the single-turn rollout and the reward, the call
formats (formats.py) and the trajectory layout with its masks (trajectory.py)."""
