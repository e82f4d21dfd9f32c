"""Running untrusted templates: what they may reach (policy) and where they run (workers).

A template is code someone else may have written. `policy` decides which attributes and calls
the Jinja sandbox lets through (an allowlist of each profile's documented API, nothing else);
`workers` runs every render in a killable process with a deadline and a memory limit.
"""
