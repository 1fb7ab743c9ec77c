"""What a run shows: the verdict table (terminal, Markdown), the HTML report, the session that writes them,
and the sections a failing test's report carries."""
