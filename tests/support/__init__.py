"""One toolbox for the tests; no test module imports another test module, and conftest.py holds
fixtures only.

- paths: the checkout and the folders the tests read (ROOT, the diagnosis corpora, the host library)
- cli: `python -m app.cli` as a subprocess (run_cli, and cli for async tests)
- served: served(app), an app on a real loopback port for the CLI
- dashboard: the test token, settings for an app on given hosts, started_app
- web: logging in through the form, CSRF tokens, reading an event stream, the app's routes
- accounts: people with passwords, and a browser-like client of the app
- launching: launch and wait for an attempt through the API
- hosts: a host's GPUs freed after a test, processes left under a folder, scripts run on a host,
  generated host views
- waiting: until (async) and wait_until (sync), which never wait forever
- strict: require(), which skips locally and fails strict runs (CI)
- hangs: the event loop's tasks printed for a test about to time out (conftest.py's hook)
- servers: free_port, a real OpenSSH sshd, a TCP relay that can go silent
- filesystem: a small tmpfs, filled up
- postgres: the PostgreSQL server the database tests use
- faults: simulated hosts and dashboards as processes of their own, to kill and freeze
- browser: chromium through Playwright: a tab, a login, the live log's line numbers
- sim: the simulated SGLang launched by hand on a simulated host
- sglang_formats: SGLang's log line formats; sglang_logs: logs written for the tests
- slurm: the Slurm cluster the tests share, and commands on its login node
"""
