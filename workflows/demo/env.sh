# Stands in for the environment worker: produces groups until told to stop.
trap 'echo "env: stopping after $n groups"; exit 0' TERM
n=0
echo "env: serving run ${DEMO_RUN_ID:-?}"
while :; do sleep 0.3; n=$((n + 1)); echo "env: pushed group $n"; done
