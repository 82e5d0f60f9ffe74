"""norms page (placeholder until its issue lands)."""
import streamlit as st

st.title("Norms")
st.info("This page is being built.")
