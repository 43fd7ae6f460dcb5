"""People and their logins: accounts with roles (`users`), password hashes (`passwords`),
server-side browser sessions (`logins`) and API tokens (`tokens`). No HTTP here; app/web turns
these into cookies and answers."""
