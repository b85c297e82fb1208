"""The Gantt chart's bench: the HTML of 10,000 jobs opened in headless Chromium."""
