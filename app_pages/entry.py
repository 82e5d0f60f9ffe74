"""The installed package's Streamlit entry script (`gptviz app` runs it); in a checkout `streamlit run app.py`
does the same. It lives here, not in gptviz/, because Streamlit puts the script's folder on sys.path, and the
package folder there would let its modules (config, hooks, ...) shadow top-level ones."""
from gptviz.app.router import main

main()
