"""Serving and deployment. ``deploy/replica/`` is one replica: the OpenAI-compatible server, its
engines, behaviour logging and spool, client keys and the served-response memory, settings.
``deploy/fleet/`` is many of them: the fleet of replica processes, the sticky weighted router,
progressive rollouts, the canary controller and its statistical judge. The simulated users that
stand in for an IDE live apart, in ``simulation/``."""
