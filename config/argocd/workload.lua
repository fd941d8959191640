-- Health of a StatefulSet or a DaemonSet for Argo CD (resource.customizations.health.apps_StatefulSet
-- and resource.customizations.health.apps_DaemonSet in argocd-cm), as Argo CD's own check judges
-- it, and more for one that names an InPlaceRolloutPolicy (annotation inplace-rollout.io/policy):
-- while its pods are not all at its template's revision it is Progressing (Argo CD's own check
-- calls an OnDelete workload Healthy at once), and when the rollout of its template under the
-- policy rolled back it is Degraded, until a new template is applied. What the rollout did is on
-- the workload's lock annotation, inplace-rollout.io/rollout (JSON), which this check reads with
-- string patterns: Argo CD's Lua has no JSON decoder.
local hs = {}
local function done(status, message)
  hs.status = status
  hs.message = message
  return hs
end

if obj.status == nil then
  return done("Progressing", "Waiting for the controller to observe the workload")
end
local generation = obj.metadata.generation or 0
if (obj.status.observedGeneration or 0) < generation then
  return done("Progressing", "Waiting for the spec update to be observed")
end

local annotations = obj.metadata.annotations or {}
local policy = annotations["inplace-rollout.io/policy"]
local lock = annotations["inplace-rollout.io/rollout"]

-- lockOnTemplate: the lock's images are the template's, container for container.
local function lockOnTemplate()
  local images = string.match(lock, '"images":(%b{})')
  if images == nil then
    return false
  end
  local template = {}
  local spec = obj.spec.template.spec
  for _, list in ipairs({spec.initContainers or {}, spec.containers or {}}) do
    for _, c in ipairs(list) do
      template[c.name] = c.image
    end
  end
  local n = 0
  for name, image in string.gmatch(images, '"([^"]+)":"([^"]+)"') do
    n = n + 1
    if template[name] ~= image then
      return false
    end
  end
  return n > 0
end

if policy ~= nil and lock ~= nil and string.find(lock, '"templateOwned":true', 1, true) and lockOnTemplate() then
  local phase = string.match(lock, '"phase":"(%a+)"') or ""
  local rolloutID = string.match(lock, '"rolloutID":"([^"]*)"') or ""
  local why = string.match(lock, '"reason":"([^"]*)"') or ""
  if phase == "RolledBack" then
    return done("Degraded", "rollout " .. rolloutID .. " of the template under policy " .. policy .. " rolled back: " .. why .. "; apply a template that works")
  elseif phase == "Paused" then
    return done("Suspended", "rollout " .. rolloutID .. " under policy " .. policy .. " waits for a person: " .. why)
  elseif phase == "Progressing" or phase == "RollingBack" or phase == "Holding" or phase == "Halted" then
    return done("Progressing", "rollout " .. rolloutID .. " under policy " .. policy .. ": " .. phase)
  end
end

if obj.kind == "DaemonSet" then
  local desired = obj.status.desiredNumberScheduled or 0
  local updated = obj.status.updatedNumberScheduled or 0
  local available = obj.status.numberAvailable or 0
  local strategy = (obj.spec.updateStrategy or {}).type or "RollingUpdate"
  if (strategy == "RollingUpdate" or policy ~= nil) and updated < desired then
    return done("Progressing", "Waiting for daemon set rollout to finish: " .. updated .. " out of " .. desired .. " new pods have been updated")
  end
  if available < desired then
    return done("Progressing", "Waiting for daemon set rollout to finish: " .. available .. " of " .. desired .. " updated pods are available")
  end
  return done("Healthy", "daemon set " .. updated .. " out of " .. desired .. " new pods have been updated")
end

local replicas = obj.spec.replicas or 1
local ready = obj.status.readyReplicas or 0
local updated = obj.status.updatedReplicas or 0
local strategy = obj.spec.updateStrategy or {}
if ready < replicas then
  return done("Progressing", "Waiting for " .. (replicas - ready) .. " pods to be ready")
end
if policy ~= nil and updated < replicas then
  return done("Progressing", updated .. " of " .. replicas .. " pods at the template's revision; policy " .. policy .. " rolls them out in place")
end
local partition = ((strategy.rollingUpdate or {}).partition) or 0
if (strategy.type or "RollingUpdate") == "RollingUpdate" and partition > 0 then
  if updated < replicas - partition then
    return done("Progressing", "Waiting for partitioned roll out to finish: " .. updated .. " out of " .. (replicas - partition) .. " new pods have been updated")
  end
  return done("Healthy", "partitioned roll out complete: " .. updated .. " new pods have been updated")
end
if strategy.type == "OnDelete" then
  return done("Healthy", "statefulset has " .. ready .. " ready pods")
end
if obj.status.updateRevision ~= obj.status.currentRevision then
  return done("Progressing", "waiting for statefulset rolling update to complete " .. updated .. " pods at revision " .. (obj.status.updateRevision or ""))
end
return done("Healthy", "statefulset rolling update complete " .. (obj.status.currentReplicas or 0) .. " pods at revision " .. (obj.status.currentRevision or ""))
