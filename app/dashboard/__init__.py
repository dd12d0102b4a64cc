"""The dashboard's HTML: server-rendered pages with inline CSS and inline SVG charts,
no script and nothing fetched from another host. Plain functions from the service's dicts to
strings (``home``: the calibrators' health; ``calibrator``: one calibrator's online loop, its
tables in ``online`` and charts in ``charts``; ``pages``: versions and jobs; ``svg``: the
reliability diagram); ``reads`` holds the reads the API has no route for; the routes
(``app.dashboard.routes``) read the data and answer. Every value that comes from
the database or the request is escaped with ``html.escape`` (``html.text``/``html.attr``)."""
