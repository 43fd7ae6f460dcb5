"""People and their logins: accounts with roles (`users`), password hashes (`passwords`), and
server-side browser sessions (`logins`). No HTTP here; app/web turns these into cookies and
answers."""
