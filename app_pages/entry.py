"""The installed package's Streamlit entry script (`gptviz app` runs it); in a checkout `streamlit run app.py`
does the same. It lives here, not in gptviz/, because Streamlit puts the script's folder on sys.path, and the
package folder there would let its modules (config, hooks, ...) shadow top-level ones.

Streamlit imports this file to serve the `st.App` below, whose lifespan warms the server before its first visitor
(gptviz/app/warm_start.py); each visitor's run then executes this file as `__main__`, which runs the router."""

import streamlit as st

if __name__ == "__main__":
    from gptviz.app.router import main

    main()
else:
    from gptviz.app.warm_start import lifespan

    app = st.App(__file__, lifespan=lifespan)
