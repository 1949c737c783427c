# Stands in for the trajectory API: up until told to stop.
trap 'echo "api: shutting down"; exit 0' TERM
echo "api: listening (demo)"
while :; do sleep 1; done
