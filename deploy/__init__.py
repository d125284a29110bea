"""Serving and deployment: replicas (server.py, serve_main.py), the fleet (fleet.py), behaviour
logging (behaviour_log.py, spool.py), the router and progressive rollouts (router.py, judge.py,
rollout.py), and the user simulator that produces delayed signals (simulator.py,
signal_policy.py)."""
