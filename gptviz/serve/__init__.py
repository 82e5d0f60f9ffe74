"""What a public server needs: limits, the memory accountant (memory), byte-bounded caches (bounded_cache),
live generation and training jobs (live_generation, training_jobs, background_job, job_sizes), the
allocator and torch threads, work clocks, devices and atomic writes. Process-wide, never in st.cache_*."""
