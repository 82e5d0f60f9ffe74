# screenshot-only wrapper (not committed): a shorter warmup scenario so the finished view can be shot quickly
from gptviz import warmup
warmup.PAGE_SCENARIO = warmup.Scenario(steps=30, warmup=15, seeds=2)
from gptviz.app.router import main
main()
