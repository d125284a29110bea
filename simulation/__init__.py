"""Simulated users: what stands in for IDE clients in the demo, benchmarks and tests. They send
requests through the OpenAI API and react through the signals API (simulator.py), with a signal
policy (signal_policy.py) and follow-up phrasings (followup_texts.py). Nothing that ships imports
this package."""
