"""Many replicas: the fleet of replica processes (fleet.py), the sticky weighted router
(router.py), progressive rollouts (rollout.py), the canary controller (canary.py) and its judge
(judge.py)."""
