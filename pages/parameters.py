"""parameters page (placeholder until its issue lands)."""
import streamlit as st

st.title("Parameters")
st.info("This page is being built.")
