"""One replica: server factory (server.py, serve_main.py), routes, the OpenAI gateway, engines,
behaviour logging (behaviour_log.py, completion_log.py, spool.py), client keys (api_keys.py),
the served-response memory (responses.py), settings, errors and metrics."""
