//! Feature gates known to kube-proxy v1.37 (`--feature-gates=A=true,B=false` and the
//! `featureGates:` map of a KubeProxyConfiguration).
//!
//! kube-proxy applies both with `utilfeature.DefaultMutableFeatureGate.SetFromMap`, which
//! (component-base `featuregate/feature_gate.go`, `unsafeSetFromMap`) rejects a name it does
//! not know ("unrecognized feature gate: X") and a locked gate set to the other value
//! ("cannot set feature gate X to V, feature is locked to D"). Setting a GA or deprecated
//! gate that is not locked only logs a warning. `AllAlpha` / `AllBeta` are the two special
//! gates every component-base feature gate knows; setting them sets every alpha / beta gate
//! that was not set explicitly to the same value.
//!
//! The table is kube-proxy v1.37's; docs/feature-gates.md says which sources it was read
//! from and what could not be verified.

/// A feature gate as the targeted kube-proxy knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    /// Its default in the targeted version.
    pub default: bool,
    /// Locked to its default (GA or deprecated with LockToDefault): setting the other value is an error.
    pub locked: bool,
    /// "ALPHA", "BETA", "GA" or "DEPRECATED" in the targeted version.
    pub stage: &'static str,
}

/// Every gate, sorted by name (byte order). The trailing comment names the package
/// that registers the gate, as the v1.35 table found it; gates that table did not have are
/// marked as new (read from the versioned list, their package not checked).
pub static GATES: &[Gate] = &[
    Gate { name: "APIResponseCompression", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "APIServerIdentity", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "APIServerWebhookAuthenticationToken", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "APIServingWithRoutine", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "AggregatedDiscoveryRemoveBetaType", default: true, locked: true, stage: "DEPRECATED" }, // apiserver
    Gate { name: "AllAlpha", default: false, locked: false, stage: "ALPHA" }, // component-base/featuregate (special)
    Gate { name: "AllBeta", default: false, locked: false, stage: "BETA" }, // component-base/featuregate (special)
    Gate { name: "AllowDNSOnlyNodeCSR", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowInsecureKubeletCertificateSigningRequests", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowOverwriteTerminationGracePeriodSeconds", default: false, locked: true, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowParsingUserUIDFromCertAuth", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "AllowServiceExternalIPs", default: true, locked: false, stage: "GA" }, // new since the v1.35 table (versioned list)
    Gate { name: "AllowUnsafeMalformedObjectDeletion", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "AtomicFIFO", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "AtomicWriteVolumeUserFields", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "AuthorizePodWebsocketUpgradeCreatePermission", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "CBORServingAndStorage", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "CPUManagerPolicyAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "CPUManagerPolicyBetaOptions", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "CPUManagerPolicyOptions", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "CRDObservedGenerationTracking", default: true, locked: false, stage: "BETA" }, // apiextensions-apiserver
    Gate { name: "CRDValidationRatcheting", default: true, locked: true, stage: "GA" }, // apiextensions-apiserver
    Gate { name: "CRIListStreaming", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "CSIServiceAccountTokenSecrets", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "CSIVolumeHealth", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ChangeContainerStatusOnKubeletRestart", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "ClearingNominatedNodeNameAfterBinding", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ClientsAllowCARotation", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "ClientsAllowCBOR", default: false, locked: false, stage: "ALPHA" }, // client-go
    Gate { name: "ClientsAllowTLSCacheGC", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "ClientsPreferCBOR", default: false, locked: false, stage: "ALPHA" }, // client-go
    Gate { name: "CloudControllerManagerWatchBasedRoutesReconciliation", default: false, locked: false, stage: "ALPHA" }, // controller-manager (relisted in k8s)
    Gate { name: "CloudControllerManagerWebhook", default: false, locked: false, stage: "ALPHA" }, // controller-manager (relisted in k8s)
    Gate { name: "ClusterTrustBundle", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "ClusterTrustBundleProjection", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "ComponentFlagz", default: true, locked: false, stage: "BETA" }, // component-base/zpages
    Gate { name: "ComponentStatusz", default: true, locked: false, stage: "BETA" }, // component-base/zpages
    Gate { name: "CompositePodGroup", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ConcurrentWatchObjectDecode", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "ConsistentListFromCacheSkipTimeoutFallback", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ConstrainedImpersonation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "ContainerCheckpoint", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ContainerRestartRules", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ContainerStopSignals", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ContextualLogging", default: true, locked: false, stage: "BETA" }, // component-base/logs
    Gate { name: "ControllerManagerReleaseLeaderElectionLockOnExit", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "CoordinatedLeaderElection", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "CrossNamespaceVolumeDataSource", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "CustomCPUCFSQuotaPeriod", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "CustomResourceFieldSelectors", default: true, locked: true, stage: "GA" }, // apiextensions-apiserver
    Gate { name: "DRAAdminAccess", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DRAConsumableCapacity", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRADerivedAttributes", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRADeviceBindingConditions", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRADeviceCompatibilityGroups", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRADeviceTaintRules", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "DRADeviceTaints", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "DRAExtendedResource", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DRAFractionalCapacityRange", default: false, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list); its on-by-default spec needs min-compatibility 1.37
    Gate { name: "DRAListTypeAttributes", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRANodeAllocatableResources", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRAOptionalNodeOperations", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRAPartitionableDevices", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRAPartitionableDevicesType", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRAPrioritizedList", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DRAResourceClaimDeviceStatus", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DRAResourceClaimGranularStatusAuthorization", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRAResourcePoolStatus", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DRASchedulerFilterTimeout", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRAWorkloadResourceClaims", default: false, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DeclarativeValidation", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "DeclarativeValidationBeta", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DeclarativeValidationTakeover", default: false, locked: true, stage: "DEPRECATED" }, // apiserver
    Gate { name: "DefaultPodSysctls", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "DeploymentReplicaSetTerminatingReplicas", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DetectCacheInconsistency", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "DisableAllocatorDualWrite", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DisableCPUQuotaWithExclusiveCPUs", default: true, locked: true, stage: "DEPRECATED" }, // k8s
    Gate { name: "DisableNodeKubeProxyVersion", default: true, locked: true, stage: "DEPRECATED" }, // k8s
    Gate { name: "DynamicResourceAllocation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "EmptyDirVolumeMode", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "EnvFiles", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "EtcdRangeStream", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "EventedPLEG", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "EvictionRequestAPI", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ExcludeAdmissionWebhookVirtualResources", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ExecProbeTimeout", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ExtendWebSocketsToKubelet", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ExternalServiceAccountTokenSigner", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "GRPCContainerProbeTLS", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "GenericWorkload", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "GitRepoVolumeDriver", default: false, locked: true, stage: "DEPRECATED" }, // k8s
    Gate { name: "GracefulNodeShutdown", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "GracefulNodeShutdownBasedOnPodPriority", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "H2CContainerProbe", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "HPAConfigurableTolerance", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "HPAGeneration", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "HPAOptimizedSelectorStore", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "HPAScaleToZero", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "HostnameOverride", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "HugepageAwareEviction", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ImageMaximumGCAge", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ImageVolume", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ImageVolumeWithDigest", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InOrderInformers", default: true, locked: true, stage: "GA" }, // client-go
    Gate { name: "InOrderInformersBatchProcess", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "InPlacePodLevelResourcesVerticalScaling", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "InPlacePodVerticalScaling", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "InPlacePodVerticalScalingExclusiveCPUs", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InPlacePodVerticalScalingExclusiveMemory", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InPlacePodVerticalScalingInitContainers", default: true, locked: true, stage: "GA" }, // new since the v1.35 table (versioned list)
    Gate { name: "InPlacePodVerticalScalingMemoryBackedVolumes", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "InPlacePodVerticalScalingSchedulerPreemption", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "InformerResourceVersion", default: true, locked: false, stage: "GA" }, // client-go
    Gate { name: "InterPodAffinityHostnameFastPath", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "JobManagedBy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KMSv1", default: false, locked: false, stage: "DEPRECATED" }, // apiserver
    Gate { name: "KubeProxyIPVS", default: true, locked: false, stage: "DEPRECATED" }, // new since the v1.35 table (versioned list)
    Gate { name: "KubeProxyNFTablesLocalhostNodePorts", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "KubeletAllocatedPodsEndpoint", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "KubeletCgroupDriverFromCRI", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletCrashLoopBackOffMax", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletEnsureSecretPulledImages", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletFineGrainedAuthz", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletInUserNamespace", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletPSI", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletPodResourcesDynamicResources", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletPodResourcesGet", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletPodResourcesListUseActivePods", default: true, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "KubeletRegistrationGetOnExistsOnly", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "KubeletSeparateDiskGC", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletServiceAccountTokenForCredentialProviders", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletTracing", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ListFromCacheSnapshot", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "LocalStorageCapacityIsolationFSQuotaMonitoring", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "LoggingAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // component-base/logs
    Gate { name: "LoggingBetaOptions", default: true, locked: false, stage: "BETA" }, // component-base/logs
    Gate { name: "ManifestBasedAdmissionControlConfig", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "MatchLabelKeysInPodAffinity", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MatchLabelKeysInPodTopologySpread", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MatchLabelKeysInPodTopologySpreadSelectorMerge", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MaxUnavailableStatefulSet", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MemoryQoS", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MultiCIDRServiceAllocator", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MutableCSINodeAllocatableCount", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MutablePVNodeAffinity", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "MutablePodResourcesForSuspendedJobs", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MutableSchedulingDirectivesForSuspendedJobs", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MutatingAdmissionPolicy", default: true, locked: false, stage: "GA" }, // apiserver
    Gate { name: "NFTablesNetlink", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "NFTablesProxyMode", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NativeHistograms", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "NodeControllerLeaseCircuitBreaker", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "NodeDeclaredFeatures", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NodeInclusionPolicyInPodTopologySpread", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NodeLifecycleConditions", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "NodeLogQuery", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NodeSwap", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NominatedNodeNameForExpectation", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "OpenAPIEnums", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "OpportunisticBatching", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PLEGOnDemandRelist", default: true, locked: true, stage: "GA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PersistentVolumeClaimUnusedSinceTime", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PodAndContainerStatsFromCRI", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodCertificateRequest", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "PodDeletionCost", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodGroupPreemptionPolicy", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PodLevelResourceManagers", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PodLevelResources", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodLevelResourcesFixDefaulting", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PodLevelResourcesFixKubeletQOSClass", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PodLogsQuerySplitStreams", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "PodObservedGenerationTracking", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodReadyToStartContainersCondition", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodSchedulingReadiness", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodTopologyLabelsAdmission", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodsAPI", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "PortForwardWebsockets", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PreferSameTrafficDistribution", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ProcMountType", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "QOSReserved", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RecoverVolumeExpansionFailure", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "RecursiveReadOnlyMounts", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ReduceDefaultCrashLoopBackOffDecay", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RelaxedEnvironmentVariableValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "RelaxedServiceNameValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ReloadKubeletClientCAFile", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "ReloadKubeletServerCertificateFile", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "RemoteRequestHeaderUID", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "ResourceHealthStatus", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ResourceHealthStatusMessage", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "RestartAllContainersOnContainerExits", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "RotateKubeletServerCertificate", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "RuntimeClassInImageCriApi", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "SELinuxChangePolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SELinuxMount", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "SELinuxMountReadWriteOncePod", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SchedulerAsyncAPICalls", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerAsyncPreemption", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerPopFromBackoffQ", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerPreQueueingHints", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "SeparateCacheWatchRPC", default: false, locked: true, stage: "DEPRECATED" }, // apiserver
    Gate { name: "SeparateTaintEvictionController", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountNodeAudienceRestriction", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ServiceAccountTokenJTI", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenNodeBinding", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenNodeBindingValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenPodNodeInfo", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceCIDRStatusFieldWiping", default: true, locked: false, stage: "DEPRECATED" }, // new since the v1.35 table (versioned list)
    Gate { name: "ShardedListAndWatch", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "SizeBasedListCostEstimate", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StaleControllerConsistencyDaemonSet", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StaleControllerConsistencyHPA", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StaleControllerConsistencyJob", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StaleControllerConsistencyReplicaSet", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StaleControllerConsistencyStatefulSet", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StatefulSetRecreateStrategy", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "StatefulSetSemanticRevisionComparison", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "StorageCapacityScoring", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "StorageNamespaceIndex", default: true, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "StorageVersionAPI", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "StorageVersionHash", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StorageVersionMigrator", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "StrictIPCIDRValidation", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "StructuredAuthenticationConfigurationEgressSelector", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StructuredAuthenticationConfigurationJWKSMetrics", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "SupplementalGroupsPolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SystemdWatchdog", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "TaintTolerationComparisonOperators", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "TokenRequestServiceAccountUIDValidation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "TopologyAwareWorkloadScheduling", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "TopologyManagerPolicyAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "TopologyManagerPolicyBetaOptions", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "TopologyManagerPolicyOptions", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "TranslateStreamCloseWebsocketRequests", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "UnauthenticatedHTTP2DOSMitigation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "UnknownVersionInteroperabilityProxy", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "UnlockWhileProcessingFIFO", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "UserNamespacesHostNetworkSupport", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "UserNamespacesSupport", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "VolumeAttributesClass", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "VolumeBindMountOptions", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
    Gate { name: "VolumeLimitScaling", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "WatchCacheInitializationPostStartHook", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "WatchList", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "WatchListClient", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "WatchListCompression", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "WebhookRoundTripLoadBalancing", default: true, locked: false, stage: "BETA" }, // new since the v1.35 table (versioned list)
    Gate { name: "WinDSR", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "WinOverlay", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "WindowsCPUAndMemoryAffinity", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "WindowsGracefulNodeShutdown", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "WindowsHostNetwork", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "WorkloadWithJob", default: false, locked: false, stage: "ALPHA" }, // new since the v1.35 table (versioned list)
];

/// What each gate needs: a gate that is enabled while one of its dependencies is disabled is
/// an error, as `SetFromMap` checks since v1.35 (`defaultKubernetesFeatureGateDependencies` of
/// `pkg/features`; component-base sorts each list). Only the gates with dependencies, sorted
/// by name; docs/feature-gates.md says which tree it was read from.
pub static DEPENDENCIES: &[(&str, &[&str])] = &[
    ("ClusterTrustBundleProjection", &["ClusterTrustBundle"]),
    ("CompositePodGroup", &["GenericWorkload", "TopologyAwareWorkloadScheduling"]),
    ("DRAAdminAccess", &["DynamicResourceAllocation"]),
    ("DRAConsumableCapacity", &["DynamicResourceAllocation"]),
    ("DRADeviceBindingConditions", &["DRAResourceClaimDeviceStatus", "DynamicResourceAllocation"]),
    ("DRADeviceTaintRules", &["DRADeviceTaints"]),
    ("DRADeviceTaints", &["DynamicResourceAllocation"]),
    ("DRAExtendedResource", &["DynamicResourceAllocation"]),
    ("DRAFractionalCapacityRange", &["DRAConsumableCapacity"]),
    ("DRAListTypeAttributes", &["DynamicResourceAllocation"]),
    ("DRANodeAllocatableResources", &["DynamicResourceAllocation"]),
    ("DRAPartitionableDevices", &["DynamicResourceAllocation"]),
    ("DRAPrioritizedList", &["DynamicResourceAllocation"]),
    ("DRAResourceClaimGranularStatusAuthorization", &["DRAResourceClaimDeviceStatus", "DynamicResourceAllocation"]),
    ("DRAResourcePoolStatus", &["DynamicResourceAllocation"]),
    ("DRASchedulerFilterTimeout", &["DynamicResourceAllocation"]),
    ("DRAWorkloadResourceClaims", &["DynamicResourceAllocation", "GenericWorkload"]),
    ("DeclarativeValidationBeta", &["DeclarativeValidation"]),
    ("DeclarativeValidationTakeover", &["DeclarativeValidation"]),
    ("DisableAllocatorDualWrite", &["MultiCIDRServiceAllocator"]),
    ("ExtendWebSocketsToKubelet", &["NodeDeclaredFeatures"]),
    ("GracefulNodeShutdownBasedOnPodPriority", &["GracefulNodeShutdown"]),
    ("ImageVolumeWithDigest", &["ImageVolume"]),
    ("InPlacePodLevelResourcesVerticalScaling", &["InPlacePodVerticalScaling", "NodeDeclaredFeatures", "PodLevelResources"]),
    ("InPlacePodVerticalScalingExclusiveCPUs", &["InPlacePodVerticalScaling"]),
    ("InPlacePodVerticalScalingExclusiveMemory", &["InPlacePodVerticalScaling"]),
    ("InPlacePodVerticalScalingInitContainers", &["InPlacePodVerticalScaling", "NodeDeclaredFeatures"]),
    ("InPlacePodVerticalScalingSchedulerPreemption", &["InPlacePodVerticalScaling"]),
    ("MatchLabelKeysInPodTopologySpreadSelectorMerge", &["MatchLabelKeysInPodTopologySpread"]),
    ("NodeControllerLeaseCircuitBreaker", &["AtomicFIFO"]),
    ("PodGroupPreemptionPolicy", &["GenericWorkload"]),
    ("PodLevelResourceManagers", &["PodLevelResources"]),
    ("PodLevelResourcesFixKubeletQOSClass", &["PodLevelResources"]),
    ("ProcMountType", &["UserNamespacesSupport"]),
    ("ResourceHealthStatus", &["DynamicResourceAllocation"]),
    ("ResourceHealthStatusMessage", &["ResourceHealthStatus"]),
    ("RestartAllContainersOnContainerExits", &["ContainerRestartRules", "NodeDeclaredFeatures"]),
    ("ServiceAccountTokenNodeBinding", &["ServiceAccountTokenNodeBindingValidation"]),
    ("StaleControllerConsistencyDaemonSet", &["AtomicFIFO"]),
    ("StaleControllerConsistencyHPA", &["AtomicFIFO"]),
    ("StaleControllerConsistencyJob", &["AtomicFIFO"]),
    ("StaleControllerConsistencyReplicaSet", &["AtomicFIFO"]),
    ("StaleControllerConsistencyStatefulSet", &["AtomicFIFO"]),
    ("StorageVersionAPI", &["APIServerIdentity"]),
    ("TopologyAwareWorkloadScheduling", &["GenericWorkload"]),
    ("UnknownVersionInteroperabilityProxy", &["APIServerIdentity"]),
    ("UserNamespacesHostNetworkSupport", &["NodeDeclaredFeatures", "UserNamespacesSupport"]),
    ("WorkloadWithJob", &["GenericWorkload"]),
];

/// The gates that change what kube-proxy programs or how it syncs (iptables/ipvs/nftables modes,
/// endpoint selection, topology, health checks), with one line each on what they change.
///
/// In v1.37 NFTablesProxyMode, PreferSameTrafficDistribution, WinDSR and WinOverlay are GA
/// and locked on (setting them to `false` is an error, the behaviour is always on).
/// ServiceTrafficDistribution and TopologyAwareHints (GA since 1.33) are no longer gates:
/// naming them is an unknown gate. The four others can be set; what svcproxy does with each
/// is [`check_supported`]'s.
pub static PROXY_GATES: &[(&str, &str)] = &[
    (
        "AllowServiceExternalIPs",
        "GA, on by default, not locked (KEP-5707, spec.externalIPs deprecated in 1.36): off, kube-proxy programs no rules for a Service's spec.externalIPs; svcproxy does the same in every mode",
    ),
    (
        "KubeProxyIPVS",
        "deprecated, on by default, not locked: off, `mode: ipvs` fails validation (validateProxyModeLinux); svcproxy does the same",
    ),
    (
        "KubeProxyNFTablesLocalhostNodePorts",
        "alpha, off by default: on, nftables mode serves TCP NodePorts on loopback with a userspace proxy when nodePortAddresses names loopback, and rejects (and counts in named counters) the localhost NodePorts it does not serve; svcproxy does the same (no effect in the other modes, as in kube-proxy)",
    ),
    (
        "NFTablesNetlink",
        "beta, on by default: off, kube-proxy's nftables mode lists chains and sets with the nft binary instead of netlink; the rules are the same, so svcproxy accepts either value (its own writer is chosen by --nft-netlink)",
    ),
    (
        "NFTablesProxyMode",
        "allows `mode: nftables` and makes iptables/ipvs modes and --cleanup remove leftover nftables rules (cmd/kube-proxy/app/server_linux.go); GA and locked",
    ),
    (
        "PreferSameTrafficDistribution",
        "reads EndpointSlice hints.forNodes (pkg/proxy/endpointslicecache.go) and, when every ready endpoint has a node hint and one names this node, uses only same-node endpoints for Cluster traffic policy (trafficDistribution PreferSameNode; pkg/proxy/topology.go); GA and locked",
    ),
    (
        "WinDSR",
        "Windows kernel proxier only: allows enableDSR (direct server return load balancers); an error at startup if disabled",
    ),
    (
        "WinOverlay",
        "Windows kernel proxier only: allows running on an Overlay HNS network; an error at startup if disabled",
    ),
];

/// Checks gates as kube-proxy's `SetFromMap` does: an unknown name is an error on its own;
/// else every locked gate set to the other value is one; else every enabled gate with a
/// disabled dependency is one. Several errors are joined as Go's error aggregate joins them
/// (sorted here: Go's order is its map's).
pub fn check(gates: &std::collections::BTreeMap<String, bool>) -> Result<(), String> {
    if let Some(name) = gates.keys().find(|n| find(n).is_none()) {
        return Err(format!("unrecognized feature gate: {name}"));
    }
    let mut errors = Vec::new();
    for (name, value) in gates {
        let gate = find(name).expect("known: checked above");
        if gate.locked && *value != gate.default {
            errors.push(format!("cannot set feature gate {name} to {value}, feature is locked to {}", gate.default));
        }
    }
    if errors.is_empty() {
        for (gate, needs) in DEPENDENCIES {
            if !enabled(gates, gate) {
                continue;
            }
            let off: Vec<&str> = needs.iter().copied().filter(|d| !enabled(gates, d)).collect();
            if !off.is_empty() {
                // Go's `%v` of a slice: brackets, items separated by a space.
                errors.push(format!("{gate} is enabled, but depends on features that are disabled: [{}]", off.join(" ")));
            }
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

fn find(name: &str) -> Option<&'static Gate> {
    GATES.binary_search_by(|g| g.name.cmp(name)).ok().map(|i| &GATES[i])
}

/// Whether the gate `name` is on once `gates` is applied, as component-base's `Enabled`
/// answers: the value set for it, else the value `AllAlpha`/`AllBeta` set for its stage (a
/// locked gate keeps its default), else its default. An unknown name is off.
pub fn enabled(gates: &std::collections::BTreeMap<String, bool>, name: &str) -> bool {
    let Some(gate) = find(name) else { return false };
    if let Some(v) = gates.get(name) {
        return *v;
    }
    let all = match gate.stage {
        "ALPHA" => gates.get("AllAlpha"),
        "BETA" => gates.get("AllBeta"),
        _ => None,
    };
    match all {
        Some(v) if !gate.locked => *v,
        _ => gate.default,
    }
}

/// The gate values svcproxy cannot honour in `mode`, and kube-proxy's validation that
/// depends on a gate: an error naming the gate. kube-proxy v1.37 would start and program
/// something svcproxy does not program (or, for `KubeProxyIPVS`, refuse the mode as here).
pub fn check_supported(gates: &std::collections::BTreeMap<String, bool>, mode: super::kinds::ProxyMode) -> Result<(), String> {
    use super::kinds::ProxyMode;
    if mode == ProxyMode::Ipvs && !enabled(gates, "KubeProxyIPVS") {
        // kube-proxy's validateProxyModeLinux: the modes it lists are sorted and joined by ", ".
        return Err("mode \"ipvs\": must be iptables, nftables or blank (blank means the best-available proxy [currently iptables]); ipvs mode is turned off by the KubeProxyIPVS feature gate".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::kinds::ProxyMode;
    use super::*;

    fn m(pairs: &[(&str, bool)]) -> std::collections::BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn check_refuses_unknown_and_locked_gates_as_kube_proxy_does() {
        assert_eq!(check(&m(&[("NoSuchGate", true)])), Err("unrecognized feature gate: NoSuchGate".into()));
        assert_eq!(
            check(&m(&[("PreferSameTrafficDistribution", false)])),
            Err("cannot set feature gate PreferSameTrafficDistribution to false, feature is locked to true".into())
        );
        assert_eq!(check(&m(&[("PreferSameTrafficDistribution", true), ("AllAlpha", false)])), Ok(()));
        // GA since 1.33 and no longer gates in 1.37: unknown, as kube-proxy says.
        assert_eq!(check(&m(&[("ServiceTrafficDistribution", true)])), Err("unrecognized feature gate: ServiceTrafficDistribution".into()));
        assert_eq!(check(&m(&[("TopologyAwareHints", true)])), Err("unrecognized feature gate: TopologyAwareHints".into()));
        // Locked in 1.37 (GA in 1.37, not locked in the 1.35 table).
        assert!(check(&m(&[("HostnameOverride", false)])).is_err());
        // Not locked: both values pass the generic check.
        assert_eq!(check(&m(&[("AllowServiceExternalIPs", false), ("KubeProxyIPVS", false), ("NFTablesNetlink", false)])), Ok(()));
    }

    #[test]
    fn enabled_applies_the_value_then_all_alpha_or_beta_then_the_default() {
        assert!(!enabled(&m(&[]), "KubeProxyNFTablesLocalhostNodePorts"));
        assert!(enabled(&m(&[("AllAlpha", true)]), "KubeProxyNFTablesLocalhostNodePorts"));
        assert!(!enabled(&m(&[("AllAlpha", true), ("KubeProxyNFTablesLocalhostNodePorts", false)]), "KubeProxyNFTablesLocalhostNodePorts"));
        assert!(enabled(&m(&[]), "NFTablesNetlink"));
        assert!(!enabled(&m(&[("AllBeta", false)]), "NFTablesNetlink"));
        // AllAlpha/AllBeta do not reach GA or deprecated gates.
        assert!(enabled(&m(&[("AllBeta", false), ("AllAlpha", false)]), "KubeProxyIPVS"));
        assert!(!enabled(&m(&[("KubeProxyIPVS", false)]), "KubeProxyIPVS"));
        assert!(!enabled(&m(&[]), "NoSuchGate"));
    }

    #[test]
    fn check_supported_refuses_what_svcproxy_does_not_do() {
        for mode in [ProxyMode::Iptables, ProxyMode::Ipvs, ProxyMode::Nftables] {
            assert_eq!(check_supported(&m(&[]), mode), Ok(()), "{mode:?}");
            assert_eq!(check_supported(&m(&[("NFTablesNetlink", false)]), mode), Ok(()), "{mode:?}");
            assert_eq!(check_supported(&m(&[("AllowServiceExternalIPs", false)]), mode), Ok(()), "{mode:?}: honoured since issue 35");
        }
        let e = check_supported(&m(&[("KubeProxyIPVS", false)]), ProxyMode::Ipvs).unwrap_err();
        assert!(e.starts_with("mode \"ipvs\": must be iptables, nftables or blank"), "{e}");
        assert_eq!(check_supported(&m(&[("KubeProxyIPVS", false)]), ProxyMode::Iptables), Ok(()));
        // Honoured in nftables mode; kube-proxy's other modes do not read it.
        let on = m(&[("KubeProxyNFTablesLocalhostNodePorts", true)]);
        for mode in [ProxyMode::Iptables, ProxyMode::Ipvs, ProxyMode::Nftables] {
            assert_eq!(check_supported(&on, mode), Ok(()), "{mode:?}");
            assert_eq!(check_supported(&m(&[("AllAlpha", true)]), mode), Ok(()), "{mode:?}");
        }
    }

    #[test]
    fn sorted_and_unique() {
        for w in GATES.windows(2) {
            assert!(w[0].name < w[1].name, "{} !< {}", w[0].name, w[1].name);
        }
        for w in DEPENDENCIES.windows(2) {
            assert!(w[0].0 < w[1].0, "{} !< {}", w[0].0, w[1].0);
        }
        for (gate, needs) in DEPENDENCIES {
            assert!(find(gate).is_some(), "{gate} not in GATES");
            assert!(!needs.is_empty(), "{gate}");
            for w in needs.windows(2) {
                assert!(w[0] < w[1], "{gate}: {} !< {}", w[0], w[1]);
            }
            for dep in *needs {
                assert!(find(dep).is_some(), "{gate} needs {dep}, not in GATES");
            }
        }
    }

    #[test]
    fn check_refuses_an_enabled_gate_whose_dependency_is_disabled() {
        // The defaults are consistent (component-base refuses to register them otherwise).
        assert_eq!(check(&m(&[])), Ok(()));
        assert_eq!(
            check(&m(&[("TopologyAwareWorkloadScheduling", true)])),
            Err("TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload]".into())
        );
        assert_eq!(check(&m(&[("TopologyAwareWorkloadScheduling", true), ("GenericWorkload", true)])), Ok(()));
        // Turning a dependency off while its default-on dependent stays on.
        assert_eq!(
            check(&m(&[("APIServerIdentity", false)])),
            Err("UnknownVersionInteroperabilityProxy is enabled, but depends on features that are disabled: [APIServerIdentity]".into())
        );
        assert_eq!(check(&m(&[("APIServerIdentity", false), ("UnknownVersionInteroperabilityProxy", false)])), Ok(()));
        // Several errors: Go's aggregate, "[e1, e2]"; a gate's disabled dependencies in sorted order.
        assert_eq!(
            check(&m(&[("AllAlpha", true)])),
            Err("[CompositePodGroup is enabled, but depends on features that are disabled: [GenericWorkload], \
                 PodGroupPreemptionPolicy is enabled, but depends on features that are disabled: [GenericWorkload], \
                 TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload], \
                 WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]]"
                .into())
        );
        assert_eq!(check(&m(&[("AllAlpha", true), ("AllBeta", true)])), Ok(()));
        // A gate never depends on a less stable one, so turning every beta gate off passes.
        assert_eq!(check(&m(&[("AllBeta", false)])), Ok(()));
        assert_eq!(
            check(&m(&[("CompositePodGroup", true), ("GenericWorkload", true)])),
            Err("CompositePodGroup is enabled, but depends on features that are disabled: [TopologyAwareWorkloadScheduling]".into())
        );
        // Two disabled dependencies: Go's `%v` of the sorted list.
        assert_eq!(
            check(&m(&[("CompositePodGroup", true)])),
            Err("CompositePodGroup is enabled, but depends on features that are disabled: [GenericWorkload TopologyAwareWorkloadScheduling]".into())
        );
        assert_eq!(
            check(&m(&[("PodLevelResources", false)])),
            Err("[InPlacePodLevelResourcesVerticalScaling is enabled, but depends on features that are disabled: [PodLevelResources], \
                 PodLevelResourceManagers is enabled, but depends on features that are disabled: [PodLevelResources], \
                 PodLevelResourcesFixKubeletQOSClass is enabled, but depends on features that are disabled: [PodLevelResources]]"
                .into())
        );
        // Dependencies are checked only once every name and lock passed; lock errors are all reported.
        assert_eq!(check(&m(&[("TopologyAwareWorkloadScheduling", true), ("NoSuchGate", true)])), Err("unrecognized feature gate: NoSuchGate".into()));
        assert_eq!(
            check(&m(&[("TopologyAwareWorkloadScheduling", true), ("PreferSameTrafficDistribution", false), ("NFTablesProxyMode", false)])),
            Err("[cannot set feature gate NFTablesProxyMode to false, feature is locked to true, \
                 cannot set feature gate PreferSameTrafficDistribution to false, feature is locked to true]"
                .into())
        );
    }

    #[test]
    fn dra_fractional_capacity_range_is_off_at_min_compatibility_1_36() {
        // Its two 1.37 specs: off, and on only from min-compatibility 1.37; kube-proxy runs at 1.36.
        let g = find("DRAFractionalCapacityRange").expect("DRAFractionalCapacityRange");
        assert!(!g.default && g.stage == "BETA");
        assert_eq!(check(&m(&[("DRAConsumableCapacity", false)])), Ok(()));
        assert!(check(&m(&[("DRAConsumableCapacity", false), ("AllBeta", true)])).is_err());
    }

    #[test]
    fn stages_and_locks_are_consistent() {
        for g in GATES {
            assert!(
                matches!(g.stage, "ALPHA" | "BETA" | "GA" | "DEPRECATED"),
                "{}: {}",
                g.name,
                g.stage
            );
            if g.locked {
                assert!(matches!(g.stage, "GA" | "DEPRECATED"), "{} locked at {}", g.name, g.stage);
            }
            if g.stage == "ALPHA" {
                assert!(!g.default, "{} alpha but on by default", g.name);
            }
        }
    }

    #[test]
    fn known_gates() {
        let nft = find("NFTablesProxyMode").expect("NFTablesProxyMode");
        assert!(nft.default && nft.locked && nft.stage == "GA");
        let psd = find("PreferSameTrafficDistribution").expect("PreferSameTrafficDistribution");
        assert!(psd.default && psd.locked);
        assert!(find("ContextualLogging").is_some());
        assert!(find("LoggingAlphaOptions").is_some());
        assert!(find("ComponentFlagz").is_some());
        assert!(find("AllAlpha").is_some() && find("AllBeta").is_some());
        assert!(find("LoggingStableOptions").is_none());
        let lnp = find("KubeProxyNFTablesLocalhostNodePorts").expect("KubeProxyNFTablesLocalhostNodePorts");
        assert!(!lnp.default && !lnp.locked && lnp.stage == "ALPHA");
        let ipvs = find("KubeProxyIPVS").expect("KubeProxyIPVS");
        assert!(ipvs.default && !ipvs.locked && ipvs.stage == "DEPRECATED");
        let netlink = find("NFTablesNetlink").expect("NFTablesNetlink");
        assert!(netlink.default && !netlink.locked && netlink.stage == "BETA");
        let eips = find("AllowServiceExternalIPs").expect("AllowServiceExternalIPs");
        assert!(eips.default && !eips.locked);
        assert!(find("ServiceTrafficDistribution").is_none() && find("TopologyAwareHints").is_none());
        assert!(find("WatchListClient").is_some() && find("InOrderInformers").is_some_and(|g| g.locked));
        // The internal constant CPUCFSQuotaPeriod is registered under this name.
        assert!(find("CustomCPUCFSQuotaPeriod").is_some());
        assert!(find("CPUCFSQuotaPeriod").is_none());
    }

    #[test]
    fn proxy_gates_are_known() {
        for (name, what) in PROXY_GATES {
            assert!(find(name).is_some(), "{name} not in GATES");
            assert!(!what.is_empty());
        }
    }

    #[test]
    fn proxy_gates_say_svcproxy_refuses_only_what_it_refuses() {
        let modes = [ProxyMode::Iptables, ProxyMode::Ipvs, ProxyMode::Nftables];
        for (name, what) in PROXY_GATES {
            let refused = modes.iter().any(|mode| [true, false].iter().any(|v| check_supported(&m(&[(name, *v)]), *mode).is_err()));
            // A refusal is svcproxy's own, or kube-proxy's validation it repeats.
            let says = what.contains("svcproxy refuses") || (what.contains("fails validation") && what.contains("svcproxy does the same"));
            assert_eq!(says, refused, "{name}: {what}");
        }
    }
}
