#!/usr/bin/env bash
# Launch `kernelstream replay` on Google Cloud Dataflow (Runner V2, custom SDK container).
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket \
#   IMAGE=europe-west1-docker.pkg.dev/my-project/kernelstream/kernelstream-beam:0.1.0 \
#   deploy/dataflow/run.sh DATA OUT [kernelstream replay options ...] [-- extra Beam options ...]
#
# DATA and OUT are passed to `kernelstream replay` as they are: gs:// URLs (the workers read
# DATA and write the Parquet outputs there; summary.json lands in OUT too). See README.md.
# Extra Beam options after `--` are appended after the ones set here (later wins), e.g.
# `-- --max_num_workers=4 --machine_type=n2-highmem-4`.
#
# DRY_RUN=1 prints the command instead of running it.
set -euo pipefail

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
[ "$#" -ge 2 ] || usage
: "${PROJECT:?set PROJECT (the Google Cloud project)}"
: "${REGION:?set REGION (the Dataflow region, e.g. europe-west1)}"
: "${BUCKET:?set BUCKET (a GCS bucket for temp and staging files, without gs://)}"
: "${IMAGE:?set IMAGE (the pushed image of deploy/Dockerfile built with BEAM_EXTRAS=gcp)}"

data=$1
out=$2
shift 2
replay_args=()
beam_args=()
while [ "$#" -gt 0 ]; do
    if [ "$1" = "--" ]; then
        shift
        beam_args=("$@")
        break
    fi
    replay_args+=("$1")
    shift
done

job_name=${JOB_NAME:-kernelstream-$(date -u +%Y%m%d-%H%M%S)}
KERNELSTREAM=${KERNELSTREAM:-kernelstream}

cmd=(
    "$KERNELSTREAM" replay "$data" --out "$out" --runner beam "${replay_args[@]}" --
    --runner=DataflowRunner
    --project="$PROJECT"
    --region="$REGION"
    --job_name="$job_name"
    --temp_location="gs://$BUCKET/kernelstream/tmp"
    --staging_location="gs://$BUCKET/kernelstream/staging"
    # kernelstream and its dependencies are in the image: no staging of the SDK or packages.
    --sdk_container_image="$IMAGE"
    --sdk_location=container
    --experiments=use_runner_v2
    # the replay's per-key state holds blocks that arrived early: bag state on Dataflow
    --early_state=bag
    "${beam_args[@]}"
)

if [ -n "${DRY_RUN:-}" ]; then
    printf '%q ' "${cmd[@]}"
    printf '\n'
    exit 0
fi
exec "${cmd[@]}"
