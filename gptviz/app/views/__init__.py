"""Draw-only parts of the larger pages (a page's tabs): layout that reads session state and draws what the
services in gptviz/app/services return; no computation or caching of their own."""
