"""Serving and deployment: replicas (server.py, serve_main.py), the fleet (fleet.py), behaviour
logging (behaviour_log.py, spool.py), the signals API's client keys and served-response memory
(api_keys.py, responses.py), the router and progressive rollouts (router.py, judge.py,
rollout.py), and the user simulator that posts delayed signals to the signals API (simulator.py,
signal_policy.py)."""
